package checkpoint

import (
	"archive/zip"
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"path"
	"strings"
)

// torch.save's zip format (PyTorch 1.6 and later): an archive whose entries sit
// under one directory, ARCHIVE/data.pkl (the pickled object, whose persistent IDs
// name storages), ARCHIVE/data/KEY (each storage's raw bytes), ARCHIVE/byteorder
// ("little" or "big"; little when absent) and ARCHIVE/version. torch.save stores
// every entry uncompressed.

// pickleLimit is the most that a zip's data.pkl may inflate to. torch.save stores
// it uncompressed, so it is smaller than the file; the factor leaves room for a
// file whose entries were compressed afterwards.
func pickleLimit(size int64) int64 { return 4*size + 1<<20 }

func readZip(r io.ReaderAt, size int64) (map[string]Tensor, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: zip: %v", ErrCorrupt, err)
	}
	entries := make(map[string]*zip.File, len(zr.File))
	var pkl *zip.File
	for _, f := range zr.File {
		entries[f.Name] = f
		if path.Base(f.Name) == "data.pkl" && strings.Count(f.Name, "/") <= 1 {
			if pkl != nil {
				return nil, fmt.Errorf("%w: zip holds %s and %s", ErrCorrupt, pkl.Name, f.Name)
			}
			pkl = f
		}
	}
	if pkl == nil {
		return nil, fmt.Errorf("%w: a zip archive without data.pkl is not a PyTorch checkpoint", ErrUnknownFormat)
	}
	prefix := strings.TrimSuffix(pkl.Name, "data.pkl")
	bo := binary.ByteOrder(binary.LittleEndian)
	if f := entries[prefix+"byteorder"]; f != nil {
		b, err := readEntry(f, 16)
		if err != nil {
			return nil, err
		}
		switch strings.TrimSpace(string(b)) {
		case "little":
		case "big":
			bo = binary.BigEndian
		default:
			return nil, fmt.Errorf("%w: byteorder %q", ErrCorrupt, b)
		}
	}
	mem := valueBudget(size)
	loader := newTorchLoader(size, mem)
	obj, err := unpickleEntry(pkl, size, mem, loader.hooks())
	if err != nil {
		return nil, err
	}
	tensors, roots, err := torchTensors(obj, mem, size)
	if err != nil {
		return nil, err
	}
	jobs := make([]readJob, 0, len(roots))
	for _, st := range roots {
		name := prefix + "data/" + st.key
		f := entries[name]
		if f == nil {
			return nil, fmt.Errorf("%w: storage %s missing from the archive", ErrCorrupt, name)
		}
		if f.UncompressedSize64 < uint64(len(st.data)) {
			return nil, fmt.Errorf("%w: %s holds %d bytes, want %d", ErrCorrupt, name, f.UncompressedSize64, len(st.data))
		}
		j := readJob{name: name, dst: st.data}
		full := f.UncompressedSize64 == uint64(len(st.data))
		if f.Method == zip.Store && f.Flags&0x1 == 0 {
			off, err := f.DataOffset()
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
			}
			if f.CompressedSize64 != f.UncompressedSize64 || off < 0 || int64(len(st.data)) > size-off {
				return nil, fmt.Errorf("%w: %s: %d bytes at offset %d run past the end of a %d-byte file", ErrCorrupt, name, len(st.data), off, size)
			}
			j.off, j.crc, j.checkCRC = off, f.CRC32, full && f.CRC32 != 0
		} else {
			j.open = f.Open
		}
		jobs = append(jobs, j)
	}
	if err := readAll(r, jobs); err != nil {
		return nil, err
	}
	return finishTorch(tensors, bo), nil
}

// unpickleEntry streams the pickle in entry f of a size-byte file through the
// unpickler, without holding its bytes, then reads the entry to its end so that
// archive/zip checks its length and CRC-32.
func unpickleEntry(f *zip.File, size int64, mem *budget, hooks pickleHooks) (any, error) {
	limit := pickleLimit(size)
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("%w: %s inflates to %d bytes, more than the limit of %d for a %d-byte file (4 times its size plus 1 MiB)", ErrTooLarge, f.Name, f.UncompressedSize64, limit, size)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, f.Name, err)
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 1<<16)
	u := newUnpickler(br, int64(f.UncompressedSize64), mem, hooks)
	obj, err := u.load()
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, f.Name)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, f.Name, err)
	}
	return obj, nil
}

// readEntry reads a whole zip entry of at most limit bytes.
func readEntry(f *zip.File, limit int64) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, f.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, f.Name, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrCorrupt, f.Name, limit)
	}
	return b, nil
}

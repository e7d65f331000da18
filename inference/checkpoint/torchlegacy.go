package checkpoint

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
)

// torch.save's legacy format (before PyTorch 1.6, or with
// _use_new_zipfile_serialization=False): five pickles one after another (the
// magic number, the protocol version 1001, sys_info, the object, the list of
// storage keys), then every storage in the order of that list as an 8-byte
// element count and its raw bytes.

// legacyMagic is torch.serialization.MAGIC_NUMBER, the first pickle of a legacy file.
var legacyMagic, _ = new(big.Int).SetString("1950a86a20f9469cfc6c", 16)

func readLegacy(r io.ReaderAt, size int64) (map[string]Tensor, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<16)
	left := size
	mem := valueBudget(size)
	next := func(what string, hooks pickleHooks) (any, error) {
		u := newUnpickler(br, left, mem, hooks)
		v, err := u.load()
		left = u.limit
		if err != nil {
			return nil, fmt.Errorf("%w (in the %s pickle)", err, what)
		}
		return v, nil
	}
	magic, err := next("magic number", pickleHooks{})
	if err != nil {
		return nil, err
	}
	if m, ok := magic.(*big.Int); !ok || m.Cmp(legacyMagic) != 0 {
		return nil, fmt.Errorf("%w: a pickle without torch's magic number (%s)", ErrUnknownFormat, typeName(magic))
	}
	proto, err := next("protocol", pickleHooks{})
	if err != nil {
		return nil, err
	}
	if p, ok := proto.(int64); !ok || p != 1001 {
		return nil, fmt.Errorf("%w: legacy protocol %v, want 1001", ErrCorrupt, proto)
	}
	info, err := next("sys_info", pickleHooks{})
	if err != nil {
		return nil, err
	}
	bo := binary.ByteOrder(binary.LittleEndian)
	if d, ok := info.(*dict); ok {
		if le, ok := d.get("little_endian"); ok && le == false {
			bo = binary.BigEndian
		}
	}
	loader := newTorchLoader(size, mem)
	obj, err := next("data", loader.hooks())
	if err != nil {
		return nil, err
	}
	keysObj, err := next("storage keys", pickleHooks{})
	if err != nil {
		return nil, err
	}
	keys, ok := keysObj.(*list)
	if !ok {
		return nil, fmt.Errorf("%w: storage keys are %s, want a list", ErrCorrupt, typeName(keysObj))
	}
	tensors, roots, err := torchTensors(obj, mem, size)
	if err != nil {
		return nil, err
	}
	wanted := make(map[*storage]bool, len(roots))
	for _, st := range roots {
		wanted[st] = true
	}
	// The storages follow in key order, each as an int64 element count and its bytes.
	pos := size - left
	jobs := make([]readJob, 0, len(roots))
	for _, k := range keys.items {
		key, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("%w: storage key is %s", ErrCorrupt, typeName(k))
		}
		if len(key) > maxStorageKey {
			return nil, fmt.Errorf("%w: storage key of %d bytes, more than the limit of %d", ErrCorrupt, len(key), maxStorageKey)
		}
		st := loader.byKey[key]
		if st == nil {
			return nil, fmt.Errorf("%w: storage %s is listed but never used", ErrCorrupt, key)
		}
		var hdr [8]byte
		if pos > size-8 {
			return nil, fmt.Errorf("%w: storage %s: file ends at %d", ErrCorrupt, key, size)
		}
		if _, err := r.ReadAt(hdr[:], pos); err != nil {
			return nil, fmt.Errorf("%w: storage %s: %v", ErrCorrupt, key, err)
		}
		n := int64(bo.Uint64(hdr[:]))
		if n != st.numel {
			return nil, fmt.Errorf("%w: storage %s has %d elements in the file, want %d", ErrCorrupt, key, n, st.numel)
		}
		pos += 8
		nbytes := n * int64(st.dtype.Size())
		if nbytes > size-pos {
			return nil, fmt.Errorf("%w: storage %s: %d bytes at offset %d run past the end of a %d-byte file", ErrCorrupt, key, nbytes, pos, size)
		}
		if wanted[st] {
			jobs = append(jobs, readJob{name: "storage " + key, off: pos, dst: st.data})
			delete(wanted, st)
		}
		pos += nbytes
	}
	for st := range wanted {
		return nil, fmt.Errorf("%w: storage %s missing from the file", ErrCorrupt, st.key)
	}
	if err := readAll(r, jobs); err != nil {
		return nil, err
	}
	return finishTorch(tensors, bo), nil
}

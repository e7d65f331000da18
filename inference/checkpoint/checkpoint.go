// Package checkpoint reads model weights saved by PyTorch or as safetensors, and
// builds a resnet.Model from torchvision's key names. It is pure Go and never runs
// code from the file.
//
// Loading a file takes these steps:
//
//  1. The format is recognised from the first bytes, not from the file name: a zip
//     archive is PyTorch's current torch.save format, a pickle protocol header is
//     PyTorch's legacy (pre-1.6) format, an 8-byte header length followed by '{' is
//     safetensors.
//  2. The index is decoded: the pickled object (data.pkl in the zip, streamed as it
//     inflates; the fourth pickle in a legacy file) by a small unpickler that
//     knows Python's built-in types (pickle.go), given torch's storages and tensor
//     rebuild functions as hooks (torch.go); or the safetensors JSON header. The
//     pickle must hold a dict (ErrNotStateDict otherwise). Nested dictionaries are
//     flattened with dots, so a checkpoint {"state_dict": {"conv1.weight": ...}}
//     yields "state_dict.conv1.weight".
//  3. Every storage that a tensor uses is read once, in parallel, straight from the
//     file with ReadAt: a float32 little-endian tensor that fills its storage is read
//     into its final slice with one copy; other dtypes, byte orders and strided views
//     are converted to float32 after the read. Zip entries are checked against their
//     CRC-32.
//
// Corrupt, truncated or hostile input gives an error wrapping one of the sentinel
// errors below, never a panic. What a PyTorch file of S bytes may make the reader
// hold is bounded by S, and a file over a bound is refused with ErrTooLarge, in an
// error that names the limit:
//
//   - data.pkl may inflate to at most 4*S + 1 MiB bytes (torch.save stores it
//     uncompressed, so it is smaller than S);
//   - the pickle's values (stack, memo, containers, strings, tensor names) may take
//     at most 16*S + 1 MiB bytes of memory, counted before they are made, and the
//     unpickler holds at most 1,048,576 stack values, 4,096 open marks, 1,048,576
//     memo entries, strings, bytes and ints of 16 MiB, global names of 1 KiB and
//     decimal ints of 4,300 digits (Python's own limit);
//   - flattening visits at most 1,048,576 values, tensors may have 64 dimensions,
//     and storages and float32 tensors together may take at most 8*S bytes.
//
// A rejected file therefore costs about 24*S + 1 MiB of allocation at most
// (TestHostileFilesBounded checks 32*S + 4 MiB, for Go's size classes); the
// pickle of a torchvision ResNet-152 state dict (932 tensors, 241 MB) needs 2 MB
// of it. Reading a pickle takes time linear in its length: every opcode costs
// amortised O(1) (see TestUnpickleLinear).
package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/inferbench/inferbench/inference/internal/half"
)

// Sentinel errors; the errors returned wrap them with the key or entry concerned.
var (
	ErrUnknownFormat    = errors.New("checkpoint: unknown format")
	ErrCorrupt          = errors.New("checkpoint: corrupt or truncated file")
	ErrUnsupportedDType = errors.New("checkpoint: unsupported dtype")
	ErrMissingKey       = errors.New("checkpoint: missing key")
	ErrUnexpectedKey    = errors.New("checkpoint: unexpected key")
	ErrShape            = errors.New("checkpoint: wrong shape")
	// ErrTooLarge: the file asks for more than the limits that follow from its
	// size allow (see the package documentation); the error names the limit.
	ErrTooLarge = errors.New("checkpoint: over a size limit")
	// ErrNotStateDict: a PyTorch file that holds something other than a dict,
	// such as a whole pickled model or None.
	ErrNotStateDict = errors.New("checkpoint: not a state dict")
)

// DType is the element type a tensor had in the file.
type DType uint8

// The dtypes this package reads; all are converted to float32.
const (
	F32 DType = iota + 1
	F64
	F16
	BF16
	I64
	I32
	I16
	I8
	U8
	Bool
)

var dtypeNames = [...]string{F32: "F32", F64: "F64", F16: "F16", BF16: "BF16", I64: "I64", I32: "I32", I16: "I16", I8: "I8", U8: "U8", Bool: "BOOL"}

// String returns the safetensors name of d, such as "F32".
func (d DType) String() string {
	if int(d) < len(dtypeNames) && dtypeNames[d] != "" {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size is the size of one element in bytes.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16, I16:
		return 2
	}
	return 1
}

// Tensor is a tensor converted to float32, in row-major (C) order.
//
// Integer and boolean tensors, such as batch-norm's num_batches_tracked, are
// converted to float32 too (exact up to 2^24); DType says what the file held.
type Tensor struct {
	Shape []int
	Data  []float32
	DType DType
}

// Numel is the number of elements the shape describes.
func (t Tensor) Numel() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Load reads the tensors of the checkpoint at path: PyTorch's zip format, its legacy
// format, or safetensors. Keys of nested dictionaries are joined with dots.
func Load(path string) (map[string]Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	sd, err := Read(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return sd, nil
}

// Read is Load for a file of size bytes read through r; r must allow concurrent
// ReadAt calls (os.File and bytes.Reader do).
func Read(r io.ReaderAt, size int64) (map[string]Tensor, error) {
	var head [16]byte
	n, err := r.ReadAt(head[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	h := head[:n]
	switch {
	case bytes.HasPrefix(h, []byte("PK\x03\x04")) || bytes.HasPrefix(h, []byte("PK\x05\x06")):
		return readZip(r, size)
	case len(h) >= 9 && h[8] == '{':
		// Before the pickle test: a header length such as 0x280 starts with 0x80 0x02.
		return readSafetensors(r, size)
	case len(h) >= 2 && h[0] == 0x80 && h[1] >= 2 && h[1] <= 5:
		return readLegacy(r, size)
	case len(h) < 8:
		return nil, fmt.Errorf("%w: %d bytes", ErrUnknownFormat, size)
	}
	return nil, fmt.Errorf("%w: starts with % x", ErrUnknownFormat, h[:8])
}

// readJob reads one region of the file into dst.
type readJob struct {
	name string // for errors
	off  int64
	dst  []byte
	// open, if set, streams a compressed zip entry instead of ReadAt.
	open func() (io.ReadCloser, error)
	// crc, if checkCRC, is the expected CRC-32 (IEEE) of dst.
	crc      uint32
	checkCRC bool
}

// readAll runs jobs on up to GOMAXPROCS goroutines and returns the first error.
func readAll(r io.ReaderAt, jobs []readJob) error {
	workers := min(runtime.GOMAXPROCS(0), len(jobs), 16)
	if workers == 0 {
		return nil
	}
	next := make(chan *readJob)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				if errs[w] == nil {
					errs[w] = j.run(r)
				}
			}
		}()
	}
	for i := range jobs {
		next <- &jobs[i]
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

func (j *readJob) run(r io.ReaderAt) error {
	if j.open != nil {
		rc, err := j.open()
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, j.name, err)
		}
		defer rc.Close()
		if _, err := io.ReadFull(rc, j.dst); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, j.name, err)
		}
		// Reading to the end makes archive/zip check the size and CRC-32.
		if _, err := io.Copy(io.Discard, io.LimitReader(rc, 1<<20)); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, j.name, err)
		}
		return nil
	}
	if len(j.dst) > 0 {
		if _, err := r.ReadAt(j.dst, j.off); err != nil {
			return fmt.Errorf("%w: %s: reading %d bytes at offset %d: %v", ErrCorrupt, j.name, len(j.dst), j.off, err)
		}
	}
	if j.checkCRC {
		if got := crc32.ChecksumIEEE(j.dst); got != j.crc {
			return fmt.Errorf("%w: %s: CRC-32 %08x, want %08x", ErrCorrupt, j.name, got, j.crc)
		}
	}
	return nil
}

// hostLittleEndian reports whether float32 slices can be filled with
// little-endian bytes directly.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// float32Bytes is the memory of f as bytes.
func float32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), len(f)*4)
}

// convert decodes len(dst) elements of type dt from src in byte order bo.
func convert(dst []float32, src []byte, dt DType, bo binary.ByteOrder) {
	n := len(dst)
	switch dt {
	case F32:
		if bo == binary.LittleEndian && hostLittleEndian {
			copy(float32Bytes(dst), src[:4*n])
			return
		}
		for i := range dst {
			dst[i] = math.Float32frombits(bo.Uint32(src[4*i:]))
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(bo.Uint64(src[8*i:])))
		}
	case F16:
		for i := range dst {
			dst[i] = half.ToFloat32(bo.Uint16(src[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(bo.Uint16(src[2*i:])) << 16)
		}
	case I64:
		for i := range dst {
			dst[i] = float32(int64(bo.Uint64(src[8*i:])))
		}
	case I32:
		for i := range dst {
			dst[i] = float32(int32(bo.Uint32(src[4*i:])))
		}
	case I16:
		for i := range dst {
			dst[i] = float32(int16(bo.Uint16(src[2*i:])))
		}
	case I8:
		for i := range dst {
			dst[i] = float32(int8(src[i]))
		}
	case U8:
		for i := range dst {
			dst[i] = float32(src[i])
		}
	case Bool:
		for i := range dst {
			if src[i] != 0 {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
	}
}

// numel multiplies the dimensions of shape, failing on negative dimensions or a
// product above limit.
func numel(shape []int64, limit int64) (int64, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
	}
	for _, d := range shape {
		if d == 0 {
			return 0, nil
		}
	}
	n := int64(1)
	for _, d := range shape {
		if d > limit/n {
			return 0, fmt.Errorf("shape %v has more than %d elements", shape, limit)
		}
		n *= d
	}
	return n, nil
}

func intShape(s []int64) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}

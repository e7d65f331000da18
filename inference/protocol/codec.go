package protocol

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference/protocol/v2pb"
)

// inferCodec is the gRPC server's codec. Every message goes through the
// standard protobuf codec except a ModelInferRequest, whose one FP32 input's
// raw_input_contents are read from gRPC's receive buffers straight into an
// input buffer of the model's pool (pinned memory on CUDA), instead of into a
// new slice that the handler would then copy: one copy of the tensor and no
// allocation, whatever its size. The handler finds the buffer again with
// inputPool.claim. Anything else (another model, datatype or shape, a raw
// input before its tensor's description, a pool with no room) decodes as
// protobuf would; the handler then copies as usual.
type inferCodec struct {
	std encoding.CodecV2
	s   *Service
}

func (s *Service) codecOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(inferCodec{std: encoding.GetCodecV2("proto"), s: s})
}

func (c inferCodec) Name() string { return c.std.Name() }

func (c inferCodec) Marshal(v any) (mem.BufferSlice, error) { return c.std.Marshal(v) }

func (c inferCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*v2pb.ModelInferRequest)
	if !ok {
		return c.std.Unmarshal(data, v)
	}
	err := c.unmarshalInfer(data.Reader(), r)
	if err == errUncommon {
		proto.Reset(r)
		return c.std.Unmarshal(data, v)
	}
	return err
}

// errUncommon sends a message whose top level holds something this decoder
// does not read (a group) back to the standard codec.
var errUncommon = errors.New("protocol: uncommon wire type")

// rawInputField is ModelInferRequest.raw_input_contents's field number.
const rawInputField = 7

// unmarshalInfer reads the top-level fields of a ModelInferRequest one by
// one. Fields other than raw_input_contents are gathered and decoded by
// protobuf; at the first raw input, what came before it (in practice every
// other field: Go, C++ and Python write fields in number order) is decoded
// so that the raw bytes can go where the input's description says.
func (c inferCodec) unmarshalInfer(rd *mem.Reader, r *v2pb.ModelInferRequest) (err error) {
	defer rd.Close()
	var rest []byte  // the other fields, still encoded
	decoded := false // rest so far has been decoded into r
	var lent [][]byte
	defer func() {
		if err != nil {
			for _, b := range lent {
				if t, ok := c.s.model.inputs.claim(b); ok {
					c.s.model.inputs.put(t)
				}
			}
		}
	}()
	for rd.Remaining() > 0 {
		tag, err := readUvarint(rd)
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if num == rawInputField && typ == protowire.BytesType {
			n, err := readUvarint(rd)
			if err != nil {
				return err
			}
			if n > uint64(rd.Remaining()) {
				return fmt.Errorf("protocol: raw_input_contents of %d bytes in a message with %d left", n, rd.Remaining())
			}
			if !decoded {
				if err := proto.Unmarshal(rest, r); err != nil {
					return err
				}
				rest, decoded = rest[:0], true
			}
			dst := c.s.rawBuffer(r, len(r.RawInputContents), int(n))
			if err := readInto(rd, dst); err != nil {
				return err
			}
			if len(dst) > 0 && c.s.model.inputs.isLent(dst) {
				lent = append(lent, dst)
			}
			r.RawInputContents = append(r.RawInputContents, dst)
			continue
		}
		rest = protowire.AppendVarint(rest, tag)
		if rest, err = copyField(rest, rd, typ); err != nil {
			return err
		}
	}
	return proto.UnmarshalOptions{Merge: decoded}.Unmarshal(rest, r)
}

// rawBuffer is where the k-th raw input of n bytes of r goes: a lent buffer
// of the pool when it is the model's one FP32 input with a valid shape and
// exactly its size, else a new slice.
func (s *Service) rawBuffer(r *v2pb.ModelInferRequest, k, n int) []byte {
	m := s.model
	if k != 0 || len(r.GetInputs()) != 1 || !hostLittleEndian || r.GetModelName() != m.name || !m.matches(r.GetModelVersion()) {
		return make([]byte, n)
	}
	t := r.GetInputs()[0]
	images, err := m.checkInput(t.GetName(), t.GetDatatype(), t.GetShape())
	if err != nil || t.GetDatatype() != FP32 || n != m.byteSize(images, FP32) || len(t.GetParameters()) > 0 {
		return make([]byte, n)
	}
	in, ok := m.inputs.lend(images, m.imageValues())
	if !ok {
		return make([]byte, n)
	}
	return floatBytes(in.Data)
}

// parallelCopyBytes is the size from which readInto copies with several
// goroutines. gRPC hands the codec a message only once all of it has arrived,
// as one 16 KiB buffer per HTTP/2 data frame, long out of the cache for a
// batch-sized tensor; one goroutine copying 192 MB of them leaves the
// connection idle meanwhile.
const parallelCopyBytes = 8 << 20

// copyWorkers is how many goroutines readInto copies a large tensor with.
var copyWorkers = min(runtime.GOMAXPROCS(0), 8)

// readInto fills dst with the next len(dst) bytes of rd. From
// parallelCopyBytes on, the bytes are split into copyWorkers runs of whole
// buffers, each copied by a goroutine of its own.
func readInto(rd *mem.Reader, dst []byte) error {
	workers := min(copyWorkers, len(dst)/(parallelCopyBytes/4))
	if len(dst) < parallelCopyBytes || workers < 2 {
		_, err := io.ReadFull(rd, dst)
		return err
	}
	segs, err := rd.Peek(len(dst), nil)
	if err != nil {
		return err
	}
	per := (len(dst) + workers - 1) / workers
	var wg sync.WaitGroup
	start, end, first := 0, 0, 0
	for i, s := range segs {
		end += len(s)
		if end-start < per && i < len(segs)-1 {
			continue
		}
		d, run := dst[start:end], segs[first:i+1]
		wg.Go(func() {
			for _, s := range run {
				d = d[copy(d, s):]
			}
		})
		start, first = end, i+1
	}
	wg.Wait()
	_, err = rd.Discard(len(dst))
	return err
}

// readUvarint reads a base-128 varint as protobuf does: at most ten bytes,
// the tenth holding only the 64th bit.
func readUvarint(rd *mem.Reader) (uint64, error) {
	var x uint64
	for shift := uint(0); shift < 64; shift += 7 {
		b, err := rd.ReadByte()
		if err != nil {
			return 0, fmt.Errorf("protocol: truncated varint: %w", err)
		}
		if shift == 63 && b > 1 {
			return 0, fmt.Errorf("protocol: varint overflows 64 bits")
		}
		x |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return x, nil
		}
	}
	return 0, fmt.Errorf("protocol: varint overflows 64 bits")
}

// copyField appends the value of a field of wire type typ, read from rd, to
// dst.
func copyField(dst []byte, rd *mem.Reader, typ protowire.Type) ([]byte, error) {
	switch typ {
	case protowire.VarintType:
		v, err := readUvarint(rd)
		return protowire.AppendVarint(dst, v), err
	case protowire.Fixed32Type, protowire.Fixed64Type:
		size := 4
		if typ == protowire.Fixed64Type {
			size = 8
		}
		return readN(dst, rd, size)
	case protowire.BytesType:
		n, err := readUvarint(rd)
		if err != nil {
			return dst, err
		}
		if n > uint64(rd.Remaining()) {
			return dst, fmt.Errorf("protocol: field of %d bytes in a message with %d left", n, rd.Remaining())
		}
		return readN(protowire.AppendVarint(dst, n), rd, int(n))
	}
	return dst, errUncommon
}

func readN(dst []byte, rd *mem.Reader, n int) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, n)...)
	_, err := io.ReadFull(rd, dst[start:])
	return dst, err
}

// lentKey identifies a lent buffer by the address of its first byte.
func lentKey(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

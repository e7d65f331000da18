package protocol

import (
	"net/http"
	"runtime"
	"sync"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// inferCodec is the gRPC server's codec. Every message goes through the
// standard protobuf codec except a ModelInferRequest, whose one FP32 input's
// raw_input_contents are read from gRPC's receive buffers straight into an
// input buffer of the model's pool (pinned memory on CUDA), instead of into a
// new slice that the handler would then copy: one copy of the tensor and no
// allocation, whatever its size. It is decoded by the h2grpc server's
// decoder (inferSink), given the whole message at once. The handler finds
// the buffer again with inputPool.claim. Anything else (another model, datatype or shape, a raw
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
	segs := make([][]byte, len(data))
	for i, b := range data {
		segs[i] = b.ReadOnlyData()
	}
	k := c.s.newInferSink(data.Len(), true)
	if err := k.fill(segs); err != nil {
		k.Release()
		return markOverLimit(r, err)
	}
	return k.Decode(r)
}

// overLimitField is the field number under which the codec leaves, as
// r's unknown field, the message of a request over one of RequestLimits:
// grpc-go answers a codec's error as Internal, so the handler answers it
// instead, as ResourceExhausted (overLimitOf), as the h2grpc server does.
const overLimitField = protowire.MaxValidNumber

// markOverLimit leaves err's message in r if err is ResourceExhausted and
// returns nil; else it returns err.
func markOverLimit(r *v2pb.ModelInferRequest, err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return err
	}
	r.Reset()
	r.ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, overLimitField, protowire.BytesType), st.Message()))
	return nil
}

// overLimitOf returns the error markOverLimit left in r, if any.
func overLimitOf(r *v2pb.ModelInferRequest) error {
	u := r.ProtoReflect().GetUnknown()
	if len(u) == 0 {
		return nil
	}
	num, typ, n := protowire.ConsumeTag(u)
	if n < 0 || num != overLimitField || typ != protowire.BytesType {
		return nil
	}
	msg, n := protowire.ConsumeString(u[n:])
	if n < 0 {
		return nil
	}
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: codes.ResourceExhausted, Msg: msg}
}

// rawInputField is ModelInferRequest.raw_input_contents's field number.
const rawInputField = 7

// rawBuffer is where the k-th raw input of n bytes of r goes: a lent buffer
// of the pool when it is the model's one input, FP32 or UINT8 that goes to
// the server as bytes (the head of a pool tensor), with a valid shape and
// exactly its size, and the in-flight budget has room for it (lent is
// true); else, with whole (its bytes are all in memory already), a new
// slice; else nil: the caller grows a buffer as the bytes arrive.
func (s *Service) rawBuffer(r *v2pb.ModelInferRequest, k, n int, whole bool) (dst []byte, lent bool) {
	other := func() ([]byte, bool) {
		if whole {
			return make([]byte, n), false
		}
		return nil, false
	}
	m := s.model
	if k != 0 || len(r.GetInputs()) != 1 || !hostLittleEndian || r.GetModelName() != m.name || !m.matches(r.GetModelVersion()) {
		return other()
	}
	t := r.GetInputs()[0]
	images, err := m.checkInput(t.GetName(), t.GetDatatype(), t.GetShape())
	dt := t.GetDatatype()
	if err != nil || (dt != FP32 && !m.bytesToServer(dt)) || n != m.byteSize(images, dt) || len(t.GetParameters()) > 0 {
		return other()
	}
	in, ok := m.inputs.lend(m.bufferImages(n), m.imageValues())
	if !ok {
		return other()
	}
	return floatBytes(in.Data)[:n], true
}

// parallelCopyBytes is the size from which the codec copies a raw input
// with several goroutines. gRPC hands the codec a message only once all of
// it has arrived, as one 16 KiB buffer per HTTP/2 data frame, long out of
// the cache for a batch-sized tensor; one goroutine copying 192 MB of them
// leaves the connection idle meanwhile.
const parallelCopyBytes = 8 << 20

// copyWorkers is how many goroutines copySegments copies with.
var copyWorkers = min(runtime.GOMAXPROCS(0), 8)

// copySegments fills dst with the first len(dst) bytes of segs and returns
// what is left of segs, or false if they hold fewer bytes. From
// parallelCopyBytes on, the bytes are split into copyWorkers runs of whole
// segments, each copied by a goroutine of its own.
func copySegments(dst []byte, segs [][]byte) ([][]byte, bool) {
	// The segments dst takes, the last one cut where dst ends.
	n, total := 0, 0
	for ; n < len(segs) && total < len(dst); n++ {
		total += len(segs[n])
	}
	if total < len(dst) {
		return segs, false
	}
	take := segs[:n:n]
	rest := segs[n:]
	if over := total - len(dst); over > 0 {
		last := take[n-1]
		take = append(take[:n-1:n-1], last[:len(last)-over])
		rest = append([][]byte{last[len(last)-over:]}, rest...)
	}
	workers := min(copyWorkers, len(dst)/(parallelCopyBytes/4))
	if len(dst) < parallelCopyBytes || workers < 2 {
		d := dst
		for _, s := range take {
			d = d[copy(d, s):]
		}
		return rest, true
	}
	per := (len(dst) + workers - 1) / workers
	var wg sync.WaitGroup
	start, end, first := 0, 0, 0
	for i, s := range take {
		end += len(s)
		if end-start < per && i < len(take)-1 {
			continue
		}
		d, run := dst[start:end], take[first:i+1]
		wg.Go(func() {
			for _, s := range run {
				d = d[copy(d, s):]
			}
		})
		start, first = end, i+1
	}
	wg.Wait()
	return rest, true
}

// lentKey identifies a lent buffer by the address of its first byte.
func lentKey(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

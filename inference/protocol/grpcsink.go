package protocol

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/inferbench/inferbench/inference/internal/h2grpc"
	"github.com/inferbench/inferbench/inference/protocol/v2pb"
)

// grpcSink is the h2grpc server's SinkFunc: a ModelInferRequest, as a
// ModelInfer call or a message of a ModelStreamInfer call, is decoded as its
// bytes arrive, so that the one FP32 input's raw_input_contents are read from
// the socket straight into an input buffer of the model's pool (pinned
// memory on CUDA): no copy of the tensor in this process. Other messages are
// gathered and decoded as protobuf.
func (s *Service) grpcSink(method string, size int) h2grpc.Sink {
	switch method {
	case v2pb.GRPCInferenceService_ModelInfer_FullMethodName, v2pb.GRPCInferenceService_ModelStreamInfer_FullMethodName:
		return s.newInferSink(size)
	}
	return nil
}

// newInferSink returns the decoder of a ModelInferRequest of size bytes.
func (s *Service) newInferSink(size int) *inferSink {
	return &inferSink{s: s, left: size, req: new(v2pb.ModelInferRequest), need: 1}
}

// inferSink decodes a ModelInferRequest's top-level fields one by one as
// they arrive. Fields other than raw_input_contents are gathered and decoded
// by protobuf; at a raw input, what came before it (in practice every other
// field: Go, C++ and Python write fields in number order) is decoded, so that
// the raw bytes can go where the input's description says (Service.rawBuffer,
// as the grpc-go server's codec does).
type inferSink struct {
	s       *Service
	left    int    // message bytes still to come
	fields  []byte // encoded fields not yet decoded into req
	scan    int    // fields[:scan] are whole fields
	need    int    // bytes fields needs to hold its next whole tag, length or field (at least 1)
	req     *v2pb.ModelInferRequest
	decoded bool   // req holds fields decoded before a raw input
	raw     []byte // the raw input being received; nil between them
	rawOff  int
	lent    [][]byte // pool buffers in req.RawInputContents
}

func (k *inferSink) Buffer(n int) []byte {
	if k.raw != nil {
		return k.raw[k.rawOff : k.rawOff+min(n, len(k.raw)-k.rawOff)]
	}
	n = min(n, k.need)
	k.fields = slices.Grow(k.fields, n)
	return k.fields[len(k.fields) : len(k.fields)+n]
}

func (k *inferSink) Filled(n int) error {
	k.left -= n
	if k.raw != nil {
		if k.rawOff += n; k.rawOff == len(k.raw) {
			k.raw = nil
		}
		return nil
	}
	k.fields = k.fields[:len(k.fields)+n]
	return k.parse()
}

// parse moves scan over the whole fields gathered so far; at a raw input's
// tag and length it decodes what came before and starts the raw bytes.
func (k *inferSink) parse() error {
	for k.scan < len(k.fields) {
		rest := k.fields[k.scan:]
		num, typ, tn := protowire.ConsumeTag(rest)
		if tn < 0 {
			return k.short(rest, 10)
		}
		size := 0
		switch typ {
		case protowire.BytesType:
			l, ln := protowire.ConsumeVarint(rest[tn:])
			if ln < 0 {
				return k.short(rest, tn+10)
			}
			if l > uint64(len(rest)-tn-ln+k.left) {
				return fmt.Errorf("protocol: field of %d bytes in a message with %d left", l, k.left)
			}
			if num == rawInputField {
				done, err := k.startRaw(int(l), tn+ln)
				if err != nil || !done {
					return err
				}
				continue
			}
			size = tn + ln + int(l)
		case protowire.StartGroupType:
			// A group (never in a ModelInferRequest, but protobuf takes
			// one as an unknown field): gather the rest of the message,
			// after which its size is known or it is malformed.
			vn := protowire.ConsumeFieldValue(num, typ, rest[tn:])
			if vn < 0 {
				if k.left == 0 {
					return fmt.Errorf("protocol: malformed group in a ModelInferRequest")
				}
				k.need = k.left
				return nil
			}
			size = tn + vn
		default:
			vn := protowire.ConsumeFieldValue(num, typ, rest[tn:])
			if vn < 0 {
				return k.short(rest, tn+10)
			}
			size = tn + vn
		}
		if len(rest) < size {
			if size-len(rest) > k.left {
				return fmt.Errorf("protocol: truncated field in a ModelInferRequest")
			}
			k.need = size - len(rest)
			return nil
		}
		k.scan += size
	}
	k.need = 1
	return nil
}

// short handles a tag or length that does not parse: with fewer than most
// bytes of it gathered and more to come, one more byte is needed.
func (k *inferSink) short(rest []byte, most int) error {
	if len(rest) >= most || k.left == 0 {
		return fmt.Errorf("protocol: malformed field in a ModelInferRequest")
	}
	k.need = 1
	return nil
}

// startRaw decodes the fields before a raw input of n bytes whose tag and
// length are the hdr bytes at scan, and picks where its bytes go. Bytes
// gathered past them (only after a group, which gathers the rest of the
// message) are copied there; it reports whether the raw input is complete,
// what follows it then being gathered fields to parse.
func (k *inferSink) startRaw(n, hdr int) (bool, error) {
	if err := k.decodeFields(k.fields[:k.scan]); err != nil {
		return false, err
	}
	dst := k.s.rawBuffer(k.req, len(k.req.RawInputContents), n)
	if len(dst) > 0 && k.s.model.inputs.isLent(dst) {
		k.lent = append(k.lent, dst)
	}
	k.req.RawInputContents = append(k.req.RawInputContents, dst)
	got := copy(dst, k.fields[k.scan+hdr:])
	k.fields = append(k.fields[:0], k.fields[k.scan+hdr+got:]...)
	k.scan, k.need = 0, 1
	if got < n {
		k.raw, k.rawOff = dst, got
		return false, nil
	}
	return true, nil
}

func (k *inferSink) decodeFields(b []byte) error {
	err := proto.UnmarshalOptions{Merge: k.decoded}.Unmarshal(b, k.req)
	k.decoded = true
	return err
}

// Decode moves the request into m, which must be a new
// *v2pb.ModelInferRequest; its raw inputs are the sink's buffers, lent ones
// included (the handler claims them).
func (k *inferSink) Decode(m any) error {
	r, ok := m.(*v2pb.ModelInferRequest)
	if !ok {
		k.Release()
		return fmt.Errorf("protocol: a ModelInferRequest decoded into %T", m)
	}
	if k.left != 0 || k.raw != nil || k.scan != len(k.fields) {
		k.Release()
		return fmt.Errorf("protocol: truncated ModelInferRequest")
	}
	if err := k.decodeFields(k.fields); err != nil {
		k.Release()
		return err
	}
	// Move, not copy: every field of req, unknown ones too, is set on r
	// as it is.
	dst, src := r.ProtoReflect(), k.req.ProtoReflect()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	dst.SetUnknown(src.GetUnknown())
	k.lent, k.req = nil, nil
	return nil
}

// Release gives the lent buffers back to the pool.
func (k *inferSink) Release() {
	for _, b := range k.lent {
		if t, ok := k.s.model.inputs.claim(b); ok {
			k.s.model.inputs.put(t)
		}
	}
	k.lent = nil
}

// fill gives k a whole message, segs one after the other (grpc-go's codec
// gets messages so). A raw input of parallelCopyBytes or more still to come
// is copied by copySegments.
func (k *inferSink) fill(segs [][]byte) error {
	for len(segs) > 0 {
		if k.raw != nil && len(k.raw)-k.rawOff >= parallelCopyBytes {
			dst := k.raw[k.rawOff:]
			rest, ok := copySegments(dst, segs)
			if !ok {
				return fmt.Errorf("protocol: truncated ModelInferRequest")
			}
			segs = rest
			if err := k.Filled(len(dst)); err != nil {
				return err
			}
			continue
		}
		n := copy(k.Buffer(len(segs[0])), segs[0])
		if segs[0] = segs[0][n:]; len(segs[0]) == 0 {
			segs = segs[1:]
		}
		if err := k.Filled(n); err != nil {
			return err
		}
	}
	return nil
}

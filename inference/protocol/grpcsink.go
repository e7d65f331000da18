package protocol

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/inferbench/inferbench/inference/internal/net/h2grpc"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// grpcSink is the h2grpc server's SinkFunc: a ModelInferRequest, as a
// ModelInfer call or a message of a ModelStreamInfer call, is decoded as its
// bytes arrive, so that the one input's raw_input_contents (FP32, or UINT8
// that goes to the server as bytes) are read from the socket straight into
// an input buffer of the model's pool (pinned memory on CUDA): no copy of
// the tensor in this process. Other messages are
// gathered and decoded as protobuf.
func (s *Service) grpcSink(method string, size int) h2grpc.Sink {
	switch method {
	case v2pb.GRPCInferenceService_ModelInfer_FullMethodName, v2pb.GRPCInferenceService_ModelStreamInfer_FullMethodName:
		return s.newInferSink(size, false)
	}
	return nil
}

// newInferSink returns the decoder of a ModelInferRequest of size bytes.
// With whole, every byte of the message is in memory already (grpc-go's
// codec): a raw input's buffer is made at its declared length at once.
// Otherwise a length is a claim until its bytes arrive: a raw input takes a
// lent buffer of the pool, whose bytes the in-flight budget has room for,
// or one that grows as its bytes arrive.
func (s *Service) newInferSink(size int, whole bool) *inferSink {
	return &inferSink{s: s, left: size, req: new(v2pb.ModelInferRequest), need: 1, whole: whole, lim: &s.opts.Requests}
}

// inferSink decodes a ModelInferRequest's top-level fields one by one as
// they arrive. Fields other than raw_input_contents are gathered and decoded
// by protobuf; at a raw input, what came before it (in practice every other
// field: Go, C++ and Python write fields in number order) is decoded, so that
// the raw bytes can go where the input's description says (Service.rawBuffer,
// as the grpc-go server's codec does).
//
// It counts as it parses (RequestLimits): each whole top-level field is
// checked (its strings, the parameters of a tensor) and counted (inputs,
// outputs, parameters, raw inputs) before the next is gathered, and a
// string's length is checked as soon as it is read, so that a request past
// a bound is refused before more of it is read or any of it decoded.
type inferSink struct {
	s       *Service
	lim     *RequestLimits
	whole   bool                   // every byte of the message is in memory already
	left    int                    // message bytes still to come
	fields  []byte                 // encoded fields not yet decoded into req
	scan    int                    // fields[:scan] are whole fields
	need    int                    // bytes fields needs to hold its next whole tag, length or field (at least 1)
	counts  [rawInputField + 1]int // whole top-level fields seen, by number
	req     *v2pb.ModelInferRequest
	decoded bool // req holds fields decoded before a raw input
	// The raw input being received (raw is nil between them): rawLen
	// bytes, rawOff of them in, into a lent buffer or, with grow, into
	// raw[:rawOff], which grows as they arrive; it goes in
	// req.RawInputContents[rawIdx] once complete.
	raw    []byte
	rawOff int
	rawLen int
	grow   bool
	rawIdx int
	lent   [][]byte // pool buffers in req.RawInputContents
}

func (k *inferSink) Buffer(n int) []byte {
	if k.raw != nil {
		n = min(n, k.rawLen-k.rawOff)
		if k.grow && cap(k.raw)-k.rawOff < n {
			// Double, so that the bytes are copied about once in all and
			// the buffer holds at most twice what arrived.
			grown := make([]byte, k.rawOff, min(max(2*cap(k.raw), k.rawOff+n), k.rawLen))
			copy(grown, k.raw[:k.rawOff])
			k.raw = grown
		}
		return k.raw[k.rawOff : k.rawOff+n : k.rawOff+n]
	}
	n = min(n, k.need)
	if l := len(k.fields); cap(k.fields)-l < n {
		// Double, up to the end of the field being gathered: its bytes
		// are copied about once in all, and what is held is at most twice
		// what arrived.
		grown := make([]byte, l, min(max(2*cap(k.fields), l+n), l+k.need))
		copy(grown, k.fields)
		k.fields = grown
	}
	return k.fields[len(k.fields) : len(k.fields)+n]
}

func (k *inferSink) Filled(n int) error {
	k.left -= n
	if k.raw != nil {
		if k.rawOff += n; k.rawOff == k.rawLen {
			k.endRaw()
		}
		return nil
	}
	k.fields = k.fields[:len(k.fields)+n]
	return grpcStatus(k.parse())
}

// endRaw puts the raw input just completed in the request.
func (k *inferSink) endRaw() {
	k.req.RawInputContents[k.rawIdx] = k.raw[:k.rawLen:k.rawLen]
	k.raw = nil
}

// grpcStatus makes a request's *Error (an over-limit one) the gRPC status
// of its code, which both gRPC servers answer with; other errors stay as
// they are.
func grpcStatus(err error) error {
	var pe *Error
	if errors.As(err, &pe) {
		return status.Error(pe.Code, pe.Msg)
	}
	return err
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
			if err := k.checkLength(num, int(l)); err != nil {
				return err
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
		if err := k.count(num, rest[:size]); err != nil {
			return err
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
	if k.counts[rawInputField]++; k.counts[rawInputField] > k.lim.MaxInputs {
		return false, overLimit("raw_input_contents", k.lim.MaxInputs)
	}
	if err := k.decodeFields(k.fields[:k.scan]); err != nil {
		return false, err
	}
	k.rawIdx, k.rawLen, k.rawOff = len(k.req.RawInputContents), n, 0
	dst, lent := k.s.rawBuffer(k.req, k.rawIdx, n, k.whole)
	if lent {
		k.lent = append(k.lent, dst)
	}
	k.grow = !lent && !k.whole
	k.req.RawInputContents = append(k.req.RawInputContents, nil)
	past := k.fields[k.scan+hdr:]
	got := min(len(past), n)
	if k.grow {
		dst = append(make([]byte, 0, got), past[:got]...)
	} else {
		copy(dst, past[:got])
	}
	k.raw, k.rawOff = dst, got
	k.fields = append(k.fields[:0], past[got:]...)
	k.scan, k.need = 0, 1
	if got < n {
		return false, nil
	}
	k.endRaw()
	return true, nil
}

// ModelInferRequest's field numbers (and those of its messages) that
// RequestLimits count; rawInputField is in codec.go.
const (
	modelNameField    = 1
	modelVersionField = 2
	idField           = 3
	paramsField       = 4
	inputsField       = 5
	outputsField      = 6

	tensorNameField    = 1 // InferInputTensor and InferRequestedOutputTensor
	inputDatatypeField = 2
	inputShapeField    = 3
	inputParamsField   = 4
	inputContentsField = 5
	outputParamsField  = 2
	paramKeyField      = 1 // a map entry
	paramValueField    = 2
	paramStringField   = 3 // InferParameter.string_param
	fp32ContentsField  = 6 // InferTensorContents
	fp64ContentsField  = 7
	bytesContentsField = 8
)

// stringBytesWhat is what an over-long string is counted as.
const stringBytesWhat = "bytes in a name, datatype, parameter key or string"

// checkLength checks the length of a top-level string field as soon as it
// is read, before its bytes are gathered.
func (k *inferSink) checkLength(num protowire.Number, n int) error {
	switch num {
	case idField:
		if n > k.lim.MaxIDBytes {
			return overLimit("bytes in its id", k.lim.MaxIDBytes)
		}
	case modelNameField, modelVersionField:
		if n > k.lim.MaxStringBytes {
			return overLimit(stringBytesWhat, k.lim.MaxStringBytes)
		}
	}
	return nil
}

// count counts a whole top-level field f (tag included) and checks what it
// holds: a parameter, an input or an output.
func (k *inferSink) count(num protowire.Number, f []byte) error {
	var bound int
	var what string
	switch num {
	case paramsField:
		bound, what = k.lim.MaxParameters, "parameters"
	case inputsField:
		bound, what = k.lim.MaxInputs, "inputs"
	case outputsField:
		bound, what = k.lim.MaxOutputs, "outputs"
	default:
		return nil
	}
	if k.counts[num]++; k.counts[num] > bound {
		return overLimit(what, bound)
	}
	_, _, tn := protowire.ConsumeTag(f)
	v, _ := protowire.ConsumeBytes(f[tn:])
	switch num {
	case paramsField:
		return k.checkParam(v)
	case inputsField:
		return k.checkTensor(v, inputParamsField, "input", k.counts[num])
	default:
		return k.checkTensor(v, outputParamsField, "output", k.counts[num])
	}
}

// checkTensor checks an input's or output's encoded fields: the length of
// its name and datatype, its parameters' count and each parameter, and an
// input's shape's dimensions and typed contents' values (contentsValues).
// Malformed bytes are left to protobuf to report.
func (k *inferSink) checkTensor(b []byte, params protowire.Number, kind string, index int) error {
	input := params == inputParamsField
	nparams, dims := 0, 0
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case input && num == inputShapeField:
			if typ == protowire.BytesType {
				dims += varints(v)
			} else {
				dims++
			}
			if dims > k.lim.MaxShapeDims {
				return overLimit(fmt.Sprintf("dimensions in the shape of %s %d", kind, index), k.lim.MaxShapeDims)
			}
		case input && num == inputContentsField && typ == protowire.BytesType:
			if bound := k.s.model.maxBatch * k.s.model.imageValues(); contentsValues(v) > bound {
				return overLimit(fmt.Sprintf("values in the contents of %s %d", kind, index), bound)
			}
		case typ != protowire.BytesType:
		case num == params:
			if nparams++; nparams > k.lim.MaxParameters {
				return overLimit(fmt.Sprintf("parameters in %s %d", kind, index), k.lim.MaxParameters)
			}
			return k.checkParam(v)
		case num == tensorNameField || (input && num == inputDatatypeField):
			if len(v) > k.lim.MaxStringBytes {
				return overLimit(stringBytesWhat, k.lim.MaxStringBytes)
			}
		}
		return nil
	})
}

// contentsValues counts the values of an encoded InferTensorContents: a
// packed field's elements (a varint's last byte is below 0x80) and each
// other field, so that contents are refused before they are decoded, at up
// to 24 bytes a value (bytes_contents), when they hold more values than
// the model's largest input.
func contentsValues(b []byte) int {
	n := 0
	eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case typ != protowire.BytesType || num == bytesContentsField:
			n++
		case num == fp32ContentsField:
			n += len(v) / 4
		case num == fp64ContentsField:
			n += len(v) / 8
		default:
			n += varints(v)
		}
		return nil
	})
	return n
}

// varints counts the varints of a packed field: the bytes below 0x80.
func varints(b []byte) int {
	n := 0
	for _, c := range b {
		if c < 0x80 {
			n++
		}
	}
	return n
}

// checkParam checks a parameter's map entry: its key's and string value's
// lengths.
func (k *inferSink) checkParam(b []byte) error {
	return eachBytesField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case paramKeyField:
			if len(v) > k.lim.MaxStringBytes {
				return overLimit(stringBytesWhat, k.lim.MaxStringBytes)
			}
		case paramValueField:
			return eachBytesField(v, func(num protowire.Number, s []byte) error {
				if num == paramStringField && len(s) > k.lim.MaxStringBytes {
					return overLimit(stringBytesWhat, k.lim.MaxStringBytes)
				}
				return nil
			})
		}
		return nil
	})
}

// eachBytesField calls f with each length-delimited field of the encoded
// message b, skipping the others, until f fails or b ends or is malformed.
func eachBytesField(b []byte, f func(protowire.Number, []byte) error) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		return f(num, v)
	})
}

// eachField calls f with each field of the encoded message b, its value
// being a length-delimited field's bytes (nil for other types), until f
// fails or b ends or is malformed.
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil
		}
		b = b[n:]
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
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
		if k.raw != nil && !k.grow && k.rawLen-k.rawOff >= parallelCopyBytes {
			dst := k.raw[k.rawOff:k.rawLen]
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

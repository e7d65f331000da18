package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/inferbench/inferbench/inference"
)

// HeaderContentLength is the binary tensor data extension's header: the
// length of the JSON object that starts the body, before the binary tensors.
const HeaderContentLength = "Inference-Header-Content-Length"

type inferRequestJSON struct {
	ID         string       `json:"id"`
	Parameters params       `json:"parameters"`
	Inputs     []inputJSON  `json:"inputs"`
	Outputs    []outputJSON `json:"outputs"`
}

type inputJSON struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters params          `json:"parameters"`
	Data       json.RawMessage `json:"data"`
}

type outputJSON struct {
	Name       string `json:"name"`
	Parameters params `json:"parameters"`
}

// httpInfer is one decoded HTTP inference request.
type httpInfer struct {
	id         string
	in         inputJSON
	n          int           // images
	binarySize int64         // bytes of binary input data, -1 for JSON data
	binaryOut  bool          // answer the logits as binary data
	timeout    time.Duration // 0: the server's default
	inShm      *shmRef       // the input's region, or nil
	outShm     *shmRef       // the logits' region, or nil
}

// infer serves POST .../infer: (1) read and check the JSON header, (2) take
// an input buffer and (3) fill it from the binary data or the JSON numbers,
// or view the input's shared-memory region instead, (4) run the request,
// (5) answer JSON or JSON plus binary logits (or, for logits written into a
// shared-memory region, JSON without data).
func (s *Service) infer(w http.ResponseWriter, r *http.Request, m *Model) {
	if err := s.admit(m); err != nil {
		s.httpError(w, err)
		return
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		s.httpError(w, &Error{Status: http.StatusUnsupportedMediaType, Msg: fmt.Sprintf("Content-Encoding %q is not supported; send the body uncompressed", ce)})
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	req, err := s.readHeader(body, r, m)
	if err == nil {
		err = s.shmCallerHTTP(r, req.inShm, req.outShm)
	}
	if err != nil {
		s.httpError(w, err)
		return
	}
	in, doneIn, err := s.input(r.Context(), body, req, m)
	if err != nil {
		s.httpError(w, err)
		return
	}
	logits, devLogits, doneOut, err := s.output(m, req.n, req.outShm)
	if err != nil {
		doneIn(false)
		s.httpError(w, err)
		return
	}
	err = m.run(r.Context(), inference.Request{Input: in, Logits: logits, DeviceLogits: devLogits}, req.timeout, both(doneIn, doneOut))
	if err != nil {
		s.httpError(w, err)
		return
	}
	if err := writeInfer(w, m, req, logits); err != nil {
		s.httpError(w, err)
	}
}

// input returns the request's input tensor and its done function (see
// Model.run): a view of its shared-memory region, or a buffer from the pool
// filled from the body.
func (s *Service) input(ctx context.Context, body io.Reader, req *httpInfer, m *Model) (inference.Tensor, func(bool), error) {
	if req.inShm != nil {
		var extra [1]byte
		if n, _ := io.ReadFull(body, extra[:]); n > 0 {
			return inference.Tensor{}, nil, badRequest("body continues after its JSON header, but input %q is in shared memory", req.in.Name)
		}
		return s.shmInput(ctx, m, req.in.Name, req.in.Datatype, req.n, req.inShm)
	}
	in, err := m.inputs.get(ctx, req.n, m.imageValues())
	if err != nil {
		return inference.Tensor{}, nil, err
	}
	if err := s.fill(body, req, m, in); err != nil {
		m.inputs.put(in)
		return inference.Tensor{}, nil, err
	}
	if req.binarySize >= 0 && m.bytesToServer(req.in.Datatype) {
		// fill read the bytes into the buffer's memory: serve them as uint8.
		u8 := inference.Tensor{Shape: in.Shape, Datatype: inference.Uint8, Bytes: floatBytes(in.Data)[:req.binarySize]}
		return u8, func(bool) { m.inputs.put(in) }, nil
	}
	return in, func(bool) { m.inputs.put(in) }, nil
}

// readHeader reads the request's JSON object (the whole body, or the first
// Inference-Header-Content-Length bytes of it) and checks it against m. The
// decoder reads only as far as it parses, so a request over one of
// Options.Requests is refused without reading the rest of it.
func (s *Service) readHeader(body io.Reader, r *http.Request, m *Model) (*httpInfer, error) {
	src, hint, want := body, r.ContentLength, int64(-1)
	if v := r.Header.Get(HeaderContentLength); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n <= 0 || n > s.opts.MaxBodyBytes || (r.ContentLength >= 0 && n > r.ContentLength) {
			return nil, badRequest("%s %q: want a length from 1 to the body's length (%d)", HeaderContentLength, v, r.ContentLength)
		}
		src, hint, want = io.LimitReader(body, n), n, n
	}
	j, got, err := decodeRequest(src, hint, s.opts.Requests)
	if err != nil {
		return nil, err
	}
	if want >= 0 && got < want {
		return nil, badRequest("request body ended after %d of the %d bytes of its JSON header", got, want)
	}
	return m.checkRequest(j)
}

// checkRequest validates a decoded request against the model.
func (m *Model) checkRequest(j *inferRequestJSON) (*httpInfer, error) {
	if err := j.Parameters.refuse("request"); err != nil {
		return nil, err
	}
	if len(j.Inputs) != 1 {
		return nil, badRequest("request has %d inputs, model %s takes 1 (%q)", len(j.Inputs), m.name, InputName)
	}
	req := &httpInfer{id: j.ID, in: j.Inputs[0], binarySize: -1}
	var err error
	if req.n, err = m.checkInput(req.in.Name, req.in.Datatype, req.in.Shape); err != nil {
		return nil, err
	}
	if err := req.in.Parameters.refuseTensor("input " + req.in.Name); err != nil {
		return nil, err
	}
	if req.inShm, err = req.in.Parameters.shmRef("input " + req.in.Name); err != nil {
		return nil, err
	}
	want := int64(m.byteSize(req.n, req.in.Datatype))
	_, hasBinary := req.in.Parameters[paramBinaryDataSize]
	hasData := len(req.in.Data) > 0 && string(req.in.Data) != "null"
	if req.inShm != nil {
		if hasBinary || hasData {
			return nil, badRequest("input %q is in shared-memory region %q and also has data or %s: send one of them", req.in.Name, req.inShm.region, paramBinaryDataSize)
		}
	} else if v, ok := req.in.Parameters[paramBinaryDataSize]; ok {
		size, isInt := asInt64(v)
		if !isInt || size != want {
			return nil, badRequest("input %q: %s %v, want %d (%s %v)", req.in.Name, paramBinaryDataSize, v, want, req.in.Datatype, req.in.Shape)
		}
		if hasData {
			return nil, badRequest("input %q has both JSON data and %s", req.in.Name, paramBinaryDataSize)
		}
		req.binarySize = size
	} else if !hasData {
		return nil, badRequest("input %q has neither data nor the %s parameter", req.in.Name, paramBinaryDataSize)
	} else if err := jsonDatatype(req.in.Datatype); err != nil {
		return nil, badRequest("input %q: %v", req.in.Name, err)
	} else if values := int64(req.n) * int64(m.imageValues()); int64(len(req.in.Data)) < 2*values-1 {
		// Every value takes a byte and a separator: refuse data that cannot
		// hold the shape's values before taking a buffer for them, so the
		// buffer is never more than twice the bytes that came.
		return nil, badRequest("input %q: data of %d bytes cannot hold the %d values of shape %v", req.in.Name, len(req.in.Data), values, req.in.Shape)
	}
	binAll, _, err := j.Parameters.flag(paramBinaryDataOutput)
	if err != nil {
		return nil, err
	}
	req.binaryOut = binAll
	for _, o := range j.Outputs {
		if o.Name != OutputName {
			return nil, badRequest("unknown output %q: model %s has one output, %q", o.Name, m.name, OutputName)
		}
		if err := o.Parameters.refuseTensor("output " + o.Name); err != nil {
			return nil, err
		}
		if req.outShm, err = o.Parameters.shmRef("output " + o.Name); err != nil {
			return nil, err
		}
		b, set, err := o.Parameters.flag(paramBinaryData)
		if err != nil {
			return nil, err
		}
		if set {
			req.binaryOut = b
		}
	}
	v, ok := j.Parameters[paramTimeout]
	req.timeout, err = timeoutParam(v, ok)
	return req, err
}

// fill writes the request's input into in, from the body's binary data (read
// straight into in when FP32) or from the JSON data.
func (s *Service) fill(body io.Reader, req *httpInfer, m *Model, in inference.Tensor) error {
	dt, plane := req.in.Datatype, m.height*m.width
	if req.binarySize < 0 {
		if err := parseData(req.in.Data, dt, req.in.Shape, in.Data, m.lut, plane); err != nil {
			return badRequest("input %q: %v", req.in.Name, err)
		}
		req.in.Data = nil // in holds the values: the JSON may go while the request runs
		return nil
	}
	var err error
	switch {
	case dt == FP32 && hostLittleEndian:
		_, err = io.ReadFull(body, floatBytes(in.Data))
	case m.bytesToServer(dt):
		// The bytes go to the server as they are, in the pooled buffer's
		// memory (see Service.input).
		_, err = io.ReadFull(body, floatBytes(in.Data)[:req.binarySize])
	default:
		raw := make([]byte, req.binarySize)
		if _, err = io.ReadFull(body, raw); err == nil {
			widen(in.Data, raw, dt, m.lut, plane)
		}
	}
	if err != nil {
		return readError(err)
	}
	var extra [1]byte
	if n, _ := io.ReadFull(body, extra[:]); n > 0 {
		return badRequest("body continues after the %d bytes of binary data that %s declares", req.binarySize, paramBinaryDataSize)
	}
	return nil
}

// readError maps a failure to read the body.
func readError(err error) error {
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		return tooLarge("request body larger than the limit of %d bytes", mb.Limit)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("request body ended early: %v", err)
	}
	return badRequest("reading the request body: %v", err)
}

// writeInfer answers with the logits, as JSON numbers or as binary data after
// the JSON header, or, when they were written into a shared-memory region,
// with no data.
func writeInfer(w http.ResponseWriter, m *Model, req *httpInfer, logits []float32) error {
	head := make([]byte, 0, 256)
	head = append(head, `{"model_name":`...)
	head = appendJSONString(head, m.name)
	head = append(head, `,"model_version":`...)
	head = appendJSONString(head, m.version)
	if req.id != "" {
		head = append(head, `,"id":`...)
		head = appendJSONString(head, req.id)
	}
	head = fmt.Appendf(head, `,"outputs":[{"name":%q,"datatype":%q,"shape":[%d,%d]`, OutputName, FP32, req.n, m.classes)
	h := w.Header()
	if req.outShm != nil {
		// Triton names no parameters for an output written into shared
		// memory, and its C++ client (perf_analyzer's) refuses an output
		// whose parameters lack binary_data_size: the client knows where it
		// asked for the output.
		writeJSON(w, http.StatusOK, append(head, "}]}"...))
		return nil
	}
	if req.binaryOut {
		head = fmt.Appendf(head, `,"parameters":{%q:%d}}]}`, paramBinaryDataSize, 4*len(logits))
		h.Set("Content-Type", "application/octet-stream")
		h.Set(HeaderContentLength, strconv.Itoa(len(head)))
		h.Set("Content-Length", strconv.Itoa(len(head)+4*len(logits)))
		w.WriteHeader(http.StatusOK)
		w.Write(head)
		w.Write(leBytes(logits))
		return nil
	}
	head = append(head, `,"data":[`...)
	for i, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return &Error{Status: http.StatusInternalServerError, Msg: fmt.Sprintf("logit %d is %v, which JSON cannot carry: ask for binary output (%q)", i, v, paramBinaryData)}
		}
		if i > 0 {
			head = append(head, ',')
		}
		head = strconv.AppendFloat(head, float64(v), 'g', -1, 32)
	}
	writeJSON(w, http.StatusOK, append(head, "]}]}"...))
	return nil
}

// appendJSONString appends s as a JSON string. Unlike encoding/json it does
// not escape <, > and &: an id comes back as the client sent it. It escapes
// what JSON requires, U+2028 and U+2029 (as encoding/json does), and writes
// invalid UTF-8 as U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			if r == utf8.RuneError {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

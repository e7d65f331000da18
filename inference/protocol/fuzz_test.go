package protocol

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// fuzzService serves resnet.Tiny at 32x32 (at most 2 images a request) on
// the CPU, with a 64 KiB body limit.
func fuzzService(t testing.TB) *Service {
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	srv, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 2}, Model: m})
	require.NoError(t, err)
	model, err := NewModel(srv, ModelConfig{})
	require.NoError(t, err)
	s := New(model, Options{MaxBodyBytes: 64 << 10})
	t.Cleanup(func() { s.Close(); srv.Close() })
	return s
}

func FuzzParseData(f *testing.F) {
	f.Add([]byte(`[1, 2.5e-3, -0, 3]`), false)
	f.Add([]byte(`[[1,2],[3,4]]`), true)
	f.Add([]byte(`[[[1]]]`), false)
	f.Add([]byte(` [ 255 , 0 ] `), false)
	f.Add([]byte(`[1,]`), true)
	f.Fuzz(func(t *testing.T, data []byte, uint8s bool) {
		dt, shape := FP32, []int64{2, 2}
		if uint8s {
			dt = UINT8
		}
		dst := make([]float32, 4)
		lut := ImageNet.Table()
		if err := parseData(data, dt, shape, dst, lut[:1], 2); err == nil {
			// A success stored exactly the four values: parse them again
			// into a larger buffer, which must fail (count mismatch).
			big := make([]float32, 5)
			require.Error(t, parseData(data, dt, []int64{5}, big, lut[:1], 5))
		}
	})
}

// FuzzHTTPInfer sends arbitrary bodies (and Inference-Header-Content-Length
// values) to the infer endpoint: the server must answer every one with a
// status of the protocol, never panic, and keep serving.
func FuzzHTTPInfer(f *testing.F) {
	s := fuzzService(f)
	h := s.HTTPHandler()
	img := 3 * 32 * 32
	f.Add([]byte(`{"inputs":[{"name":"input","datatype":"UINT8","shape":[1,3,32,32],"data":[`+string(bytes.Repeat([]byte("7,"), img-1))+`7]}]}`), "")
	head := `{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,32,32],"parameters":{"binary_data_size":12288}}],"parameters":{"binary_data_output":true}}`
	f.Add(append([]byte(head), make([]byte, 4*img)...), strconv.Itoa(len(head)))
	f.Add([]byte(head), strconv.Itoa(len(head)+1))
	f.Add([]byte(`{"inputs":[{"name":"input","datatype":"FP16","shape":[2,3,32,32]}]}`), "-1")
	f.Fuzz(func(t *testing.T, body []byte, headerLen string) {
		r := httptest.NewRequest(http.MethodPost, "/v2/models/resnet18/infer", bytes.NewReader(body))
		if headerLen != "" {
			r.Header.Set(HeaderContentLength, headerLen)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case 200, 400, 413, 503, 504:
		default:
			t.Fatalf("status %d for body %q: %s", w.Code, clip(body), w.Body.String())
		}
	})
}

// FuzzGRPCInfer feeds arbitrary protobuf bytes, decoded as a
// ModelInferRequest, to the gRPC handler.
func FuzzGRPCInfer(f *testing.F) {
	s := fuzzService(f)
	g := grpcService{s: s}
	img := 3 * 32 * 32
	seed := func(r *v2pb.ModelInferRequest) {
		b, err := proto.Marshal(r)
		require.NoError(f, err)
		f.Add(b)
	}
	in := &v2pb.ModelInferRequest_InferInputTensor{Name: "input", Datatype: "FP32", Shape: []int64{1, 3, 32, 32}}
	seed(&v2pb.ModelInferRequest{ModelName: "resnet18", Inputs: []*v2pb.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{make([]byte, 4*img)}})
	typed := &v2pb.ModelInferRequest_InferInputTensor{Name: "input", Datatype: "UINT8", Shape: []int64{1, 3, 32, 32},
		Contents: &v2pb.InferTensorContents{UintContents: make([]uint32, img)}}
	seed(&v2pb.ModelInferRequest{ModelName: "resnet18", Inputs: []*v2pb.ModelInferRequest_InferInputTensor{typed}})
	f.Fuzz(func(t *testing.T, msg []byte) {
		var r v2pb.ModelInferRequest
		if proto.Unmarshal(msg, &r) != nil {
			return
		}
		resp, err := g.ModelInfer(context.Background(), &r)
		if err == nil {
			require.Len(t, resp.GetOutputs(), 1)
		}
	})
}

// FuzzInferCodec checks the grpc-go server's codec against protobuf itself:
// any bytes decode to the same ModelInferRequest, or fail in both, and every
// buffer the codec lends is returned.
func FuzzInferCodec(f *testing.F) {
	s := fuzzService(f)
	for _, b := range inferSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		c := inferCodec{std: encoding.GetCodecV2("proto"), s: s}
		checkInferDecoder(t, s, msg, func(r *v2pb.ModelInferRequest) error {
			return c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(msg)}, r)
		})
	})
}

// FuzzInferSink checks the h2grpc server's decoder the same way, the
// message arriving in pieces of at most chunk+1 bytes.
func FuzzInferSink(f *testing.F) {
	s := fuzzService(f)
	for i, b := range inferSeeds(f) {
		f.Add(b, uint8(i*37))
	}
	f.Fuzz(func(t *testing.T, msg []byte, chunk uint8) {
		checkInferDecoder(t, s, msg, func(r *v2pb.ModelInferRequest) error {
			k := s.grpcSink(v2pb.GRPCInferenceService_ModelInfer_FullMethodName, len(msg))
			for rest := msg; len(rest) > 0; {
				b := k.Buffer(min(int(chunk)+1, len(rest)))
				n := copy(b, rest)
				rest = rest[n:]
				if err := k.Filled(n); err != nil {
					k.Release()
					return err
				}
			}
			return k.Decode(r)
		})
	})
}

// inferSeeds are ModelInferRequests that go through the lent-buffer path
// and around it, a raw input before its description, and top-level groups.
func inferSeeds(f *testing.F) [][]byte {
	img := 3 * 32 * 32
	in := &v2pb.ModelInferRequest_InferInputTensor{Name: "input", Datatype: "FP32", Shape: []int64{1, 3, 32, 32}}
	var seeds [][]byte
	for _, r := range []*v2pb.ModelInferRequest{
		{ModelName: "resnet18", Id: "x", Inputs: []*v2pb.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{make([]byte, 4*img)}},
		{ModelName: "resnet18", Inputs: []*v2pb.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{make([]byte, 4*img), {1, 2}}},
		{ModelName: "other", Inputs: []*v2pb.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{{1, 2, 3}}},
	} {
		b, err := proto.Marshal(r)
		require.NoError(f, err)
		// The raw input first, before the tensor's description.
		raw := protowire.AppendTag(nil, rawInputField, protowire.BytesType)
		raw = protowire.AppendBytes(raw, r.RawInputContents[0])
		r2 := proto.Clone(r).(*v2pb.ModelInferRequest)
		r2.RawInputContents = r2.RawInputContents[1:]
		b2, err := proto.Marshal(r2)
		require.NoError(f, err)
		seeds = append(seeds, b, append(raw, b2...))
	}
	// Groups, which protobuf keeps as unknown fields, and a broken one.
	group := protowire.AppendTag(nil, 20, protowire.StartGroupType)
	seeds = append(seeds,
		protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(group, 1, protowire.VarintType), 5), 20, protowire.EndGroupType),
		protowire.AppendVarint(protowire.AppendTag(group, 1, protowire.VarintType), 5))
	return seeds
}

// checkInferDecoder decodes msg with decode and with protobuf: the same
// request or an error from both, and every lent buffer returned.
func checkInferDecoder(t *testing.T, s *Service, msg []byte, decode func(r *v2pb.ModelInferRequest) error) {
	var want, got v2pb.ModelInferRequest
	wantErr := proto.Unmarshal(msg, &want)
	gotErr := decode(&got)
	for _, b := range got.GetRawInputContents() {
		if t2, ok := s.model.inputs.claim(b); ok {
			s.model.inputs.put(t2)
		}
	}
	require.True(t, s.model.inputs.inUse.TryAcquire(s.model.inputs.limit), "a lent buffer was not returned")
	s.model.inputs.inUse.Release(s.model.inputs.limit)
	if status.Code(gotErr) == codes.ResourceExhausted || overLimitOf(&got) != nil {
		// Over one of RequestLimits: refused before protobuf would decode
		// it (the sink, or the codec through the request it leaves).
		return
	}
	if wantErr != nil {
		require.Error(t, gotErr)
		return
	}
	require.NoError(t, gotErr)
	want.ProtoReflect().SetUnknown(nil)
	got.ProtoReflect().SetUnknown(nil)
	require.True(t, proto.Equal(&want, &got), "decoded\n%v\nprotobuf decoded\n%v", &got, &want)
}

//go:build linux

package protocol

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/cpu"
	"github.com/inferbench/inferbench/inference/internal/gpu/fakegpu"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// fuzzSHMService is fuzzService with shared memory under a temporary
// directory: object "/in" holds two 32x32 images plus 3 bytes (region "in",
// registered whole), object "/out" 2 images' logits plus 3 bytes (region
// "out"), and object "/free" 64 KiB that nothing registered; and, in fake
// device memory (fakegpu), CUDA regions "cin" and "cout" of the sizes of
// "in" and "out".
func fuzzSHMService(t testing.TB) *Service {
	dir := t.TempDir()
	img := 4 * 3 * 32 * 32
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	be := fakegpu.Wrap(cpu.New(), 1)
	srv, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 2}, Backend: be, Model: m})
	require.NoError(t, err)
	model, err := NewModel(srv, ModelConfig{})
	require.NoError(t, err)
	s := New(model, Options{MaxBodyBytes: 64 << 10, SharedMemory: SharedMemoryLimits{Enabled: true, Dir: dir, MaxRegions: 4, MaxBytes: 1 << 20}})
	t.Cleanup(func() { s.Close(); srv.Close() })
	for key, size := range map[string]int{"in": 2*img + 3, "out": 4*2*model.classes + 3, "free": 64 << 10} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, key), make([]byte, size), 0o600))
	}
	require.NoError(t, s.shm.register("", "in", "/in", 0, uint64(2*img+3)))
	require.NoError(t, s.shm.register("", "out", "/out", 0, uint64(4*2*model.classes+3)))
	cin, cout := be.Alloc(0, 2*img+3), be.Alloc(0, 4*2*model.classes+3)
	require.NoError(t, s.shm.registerCUDA("", "cin", cin.Handle[:], 0, uint64(2*img+3)))
	require.NoError(t, s.shm.registerCUDA("", "cout", cout.Handle[:], 0, uint64(4*2*model.classes+3)))
	return s
}

// FuzzSharedMemoryInfer sends gRPC requests whose input and output name
// regions with arbitrary offsets and sizes: every one is answered (never a
// panic or a fault), and a success read and wrote only inside the regions.
func FuzzSharedMemoryInfer(f *testing.F) {
	s := fuzzSHMService(f)
	g := grpcService{s: s}
	img := int64(4 * 3 * 32 * 32)
	f.Add("in", int64(0), img, "out", int64(0), int64(20), uint8(0), int64(1))
	f.Add("in", img, img, "out", int64(20), int64(20), uint8(0), int64(1))
	f.Add("in", int64(3), img, "out", int64(1), int64(20), uint8(1), int64(1))
	f.Add("in", int64(0), 2*img, "out", int64(0), int64(40), uint8(0), int64(2))
	f.Add("nope", int64(-1), int64(-1), "", int64(0), int64(0), uint8(2), int64(3))
	f.Add("cin", int64(0), img, "cout", int64(0), int64(20), uint8(0), int64(1))
	f.Add("cin", img, img, "out", int64(20), int64(20), uint8(0), int64(1))
	f.Add("in", int64(0), 2*img, "cout", int64(3), int64(40), uint8(0), int64(2))
	f.Add("cin", int64(3), img/4, "cout", int64(0), int64(20), uint8(2), int64(1))
	f.Fuzz(func(t *testing.T, in string, inOff, inSize int64, out string, outOff, outSize int64, dt uint8, n int64) {
		datatype := []string{FP32, FP16, UINT8, "INT8"}[int(dt)%4]
		param := func(p map[string]*v2pb.InferParameter, region string, off, size int64) {
			p[paramShmRegion] = &v2pb.InferParameter{ParameterChoice: &v2pb.InferParameter_StringParam{StringParam: region}}
			p[paramShmOffset] = &v2pb.InferParameter{ParameterChoice: &v2pb.InferParameter_Int64Param{Int64Param: off}}
			p[paramShmByteSize] = &v2pb.InferParameter{ParameterChoice: &v2pb.InferParameter_Int64Param{Int64Param: size}}
		}
		r := &v2pb.ModelInferRequest{ModelName: "resnet18", Inputs: []*v2pb.ModelInferRequest_InferInputTensor{{
			Name: InputName, Datatype: datatype, Shape: []int64{n, 3, 32, 32}, Parameters: map[string]*v2pb.InferParameter{}}}}
		param(r.Inputs[0].Parameters, in, inOff, inSize)
		if out != "" {
			o := &v2pb.ModelInferRequest_InferRequestedOutputTensor{Name: OutputName, Parameters: map[string]*v2pb.InferParameter{}}
			param(o.Parameters, out, outOff, outSize)
			r.Outputs = append(r.Outputs, o)
		}
		_, err := g.ModelInfer(context.Background(), r)
		if err == nil {
			size := map[string]int64{"in": 2*img + 3, "out": 40 + 3, "cin": 2*img + 3, "cout": 40 + 3}
			require.LessOrEqual(t, inOff+inSize, size[in], "input inside its region")
			if out != "" {
				require.LessOrEqual(t, outOff+outSize, size[out], "output inside its region")
			}
		}
	})
}

// FuzzSharedMemoryHTTP sends arbitrary methods, paths and bodies to the
// system shared-memory API: each is answered with a status of the protocol,
// and the registry's bounds hold.
func FuzzSharedMemoryHTTP(f *testing.F) {
	s := fuzzSHMService(f)
	h := s.HTTPHandler()
	f.Add("POST", "region/r/register", []byte(`{"key":"/free","offset":0,"byte_size":4096}`))
	f.Add("POST", "region/r/register", []byte(`{"key":"/free","offset":65535,"byte_size":2}`))
	f.Add("POST", "region/r/unregister", []byte{})
	f.Add("GET", "status", []byte{})
	f.Add("GET", "region/in/status", []byte{})
	f.Add("POST", "region/x/register", []byte(`{"key":"//../in","byte_size":18446744073709551615}`))
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		if method != "GET" && method != "POST" {
			method = "POST"
		}
		r, err := http.NewRequest(method, "/v2/systemsharedmemory/"+path, bytes.NewReader(body))
		if err != nil {
			return
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case 200, 400, 404, 405, 409, 500:
		default:
			t.Fatalf("status %d for %s %q %q: %s", w.Code, method, path, clip(body), w.Body.String())
		}
		s.shm.mu.Lock()
		regions, bytes := s.shm.regions, s.shm.bytes
		s.shm.mu.Unlock()
		require.LessOrEqual(t, regions, 4, "regions")
		require.LessOrEqual(t, bytes, int64(1<<20), "bytes")
		if method == "POST" && w.Code == 200 {
			s.shm.unregister("", "r", systemRegion) // keep room for the next input
		}
	})
}

// FuzzRegisterBody decodes arbitrary registration bodies: a success has a
// key and numbers that print back as they came.
func FuzzRegisterBody(f *testing.F) {
	f.Add([]byte(`{"key":"/k","offset":4096,"byte_size":8}`))
	f.Add([]byte(`{"key":"/k","byte_size":1e3}`))
	f.Add([]byte(`{"key":null,"offset":-1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRegister(bytes.NewReader(body))
		if err != nil {
			return
		}
		require.Contains(t, string(body), strconv.FormatUint(req.size, 10))
	})
}

// FuzzCudaRegisterBody decodes arbitrary CUDA registration bodies: a success
// has a handle decoded from base64 and numbers that print back as they came.
func FuzzCudaRegisterBody(f *testing.F) {
	b64 := base64.StdEncoding.EncodeToString(make([]byte, 64))
	f.Add([]byte(`{"raw_handle":{"b64":"` + b64 + `"},"device_id":0,"byte_size":8}`))
	f.Add([]byte(`{"raw_handle":{"b64":"QUJD\n"},"device_id":3,"byte_size":1e3}`))
	f.Add([]byte(`{"raw_handle":null,"device_id":-1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeCudaRegister(bytes.NewReader(body))
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(req.handle), maxHandleB64)
		require.Contains(t, string(body), strconv.FormatUint(req.size, 10))
		require.Contains(t, string(body), strconv.FormatInt(req.device, 10))
	})
}

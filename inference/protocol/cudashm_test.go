//go:build linux

package protocol_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/cpu"
	"github.com/inferbench/inferbench/inference/internal/gpu/fakegpu"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// CUDA shared memory without a GPU: the fixtures serve on
// inference/internal/gpu/fakegpu, whose "device memory" is host memory behind
// fake device addresses and handles, so that the front door's
// registration, bounds, errors and in-use accounting, and the server's
// device path, run here. The GPU test is the root package's
// TestCudaSharedMemoryAcrossProcesses.

// cudaClient is a client with both shared-memory APIs.
type cudaClient interface {
	client.Client
	client.SharedMemory
	client.CudaSharedMemory
}

func (f *fixture) cudaClients(t *testing.T) map[string]cudaClient {
	return map[string]cudaClient{"http": f.httpClient(t, false), "grpc": f.grpcClient(t)}
}

// cudaFixture serves on the CPU back-end with fake device memory on two
// devices; system shared-memory objects live in dir.
func cudaFixture(t *testing.T, o fixtureOpts) (*fixture, *fakegpu.Backend, string) {
	be := fakegpu.Wrap(cpu.New(), 2)
	o.cfg.Backend = be
	f, dir := shmFixture(t, o)
	return f, be, dir
}

func putFloats(b []byte, v []float32) {
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
}

func getFloats(b []byte, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// cudaRequest asks for n images from CUDA region "cin" at inOff and the
// logits in region "cout" at outOff.
func cudaRequest(n int, inOff, outOff int64) *client.InferRequest {
	r := shmRequest(n, inOff, outOff)
	r.Inputs[0].Region.Name = "cin"
	r.OutputRegions["logits"] = client.Region{Name: "cout", Offset: outOff, ByteSize: int64(4 * n * classes)}
	return r
}

// TestCudaSharedMemoryInferenceEqualsInProcessBitForBit registers CUDA
// regions (on device 1, the tensor 16 bytes into its region) over both
// transports, alone and beside system regions in the one namespace: the
// logits written into device memory equal the in-process answer, and
// unregistering unmaps every handle.
func TestCudaSharedMemoryInferenceEqualsInProcessBitForBit(t *testing.T) {
	f, be, dir := cudaFixture(t, fixtureOpts{})
	ctx := context.Background()
	in := be.Alloc(1, 16+3*imageBytes)
	out := be.Alloc(1, 64+4*3*classes)
	sysOut := newObject(t, dir, "/sysout", 4*3*classes)
	for name, c := range f.cudaClients(t) {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, c.RegisterCudaSharedMemory(ctx, "cin", in.Handle[:], 1, uint64(16+3*imageBytes)))
			require.NoError(t, c.RegisterCudaSharedMemory(ctx, "cout", out.Handle[:], 1, uint64(64+4*3*classes)))
			require.NoError(t, c.RegisterSystemSharedMemory(ctx, "sysout", "/sysout", 0, 4*3*classes))
			st, err := c.CudaSharedMemoryStatus(ctx, "")
			require.NoError(t, err)
			assert.Equal(t, []client.CudaSharedMemoryRegion{{Name: "cin", DeviceID: 1, ByteSize: uint64(16 + 3*imageBytes)}, {Name: "cout", DeviceID: 1, ByteSize: uint64(64 + 4*3*classes)}}, st)
			st, err = c.CudaSharedMemoryStatus(ctx, "cout")
			require.NoError(t, err)
			assert.Len(t, st, 1)
			sys, err := c.SystemSharedMemoryStatus(ctx, "")
			require.NoError(t, err)
			assert.Len(t, sys, 1, "system status lists system regions only")
			for _, n := range []int{1, 3} {
				images := randomImages(uint64(30+n), n)
				putFloats(in.Bytes()[16:], images)
				want := bits(f.inProcess(t, images))

				resp, err := c.Infer(ctx, cudaRequest(n, 16, 64))
				require.NoError(t, err)
				o, err := resp.Output("logits")
				require.NoError(t, err)
				assert.Nil(t, o.Data, "logits in device memory, not in the answer")
				assert.Equal(t, want, bits(getFloats(out.Bytes()[64:], n*classes)), "batch %d", n)

				// CUDA input, system output; then host input, CUDA output.
				r := cudaRequest(n, 16, 0)
				r.OutputRegions["logits"] = client.Region{Name: "sysout", ByteSize: int64(4 * n * classes)}
				_, err = c.Infer(ctx, r)
				require.NoError(t, err)
				assert.Equal(t, want, bits(sysOut.readFloats(0, n*classes)), "CUDA input, system output")
				clear(out.Bytes())
				r = inferRequest(images)
				r.OutputRegions = map[string]client.Region{"logits": {Name: "cout", Offset: 64, ByteSize: int64(4 * n * classes)}}
				_, err = c.Infer(ctx, r)
				require.NoError(t, err)
				assert.Equal(t, want, bits(getFloats(out.Bytes()[64:], n*classes)), "host input, CUDA output")
			}
			assert.Equal(t, 2, be.Opened())
			require.NoError(t, c.UnregisterCudaSharedMemory(ctx, ""))
			st, err = c.CudaSharedMemoryStatus(ctx, "")
			require.NoError(t, err)
			assert.Empty(t, st)
			assert.Zero(t, be.Opened(), "every handle unmapped")
			sys, err = c.SystemSharedMemoryStatus(ctx, "")
			require.NoError(t, err)
			assert.Len(t, sys, 1, "unregistering every CUDA region leaves system regions")
			require.NoError(t, c.UnregisterSystemSharedMemory(ctx, ""))
		})
	}
}

// TestCudaSharedMemoryUINT8 sends UINT8 images from a CUDA region to a
// server that normalises on the device (nop, under fakegpu): they reach it
// as bytes, and the answer is the host path's.
func TestCudaSharedMemoryUINT8(t *testing.T) {
	be := fakegpu.Wrap(nop.New(), 1)
	f := newFixture(t, fixtureOpts{cfg: inference.Config{Backend: be}, opts: shmOn().opts})
	ctx := context.Background()
	c := f.grpcClient(t)
	img := make([]byte, 3*side*side)
	for i := range img {
		img[i] = byte(i * 7)
	}
	a := be.Alloc(0, len(img))
	copy(a.Bytes(), img)
	require.NoError(t, c.RegisterCudaSharedMemory(ctx, "u8", a.Handle[:], 0, uint64(len(img))))
	shape := []int64{1, 3, side, side}
	fromHost, err := c.Infer(ctx, &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{{Name: "input", Datatype: "UINT8", Shape: shape, Data: img}}})
	require.NoError(t, err)
	fromDevice, err := c.Infer(ctx, &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{{Name: "input", Datatype: "UINT8", Shape: shape,
		Region: &client.Region{Name: "u8", ByteSize: int64(len(img))}}}})
	require.NoError(t, err)
	assert.Equal(t, logitsOf(t, fromHost), logitsOf(t, fromDevice))
}

func TestCudaSharedMemoryErrorsNameWhatWasExpectedAndWhatCame(t *testing.T) {
	f, be, dir := cudaFixture(t, fixtureOpts{opts: protocol.Options{SharedMemory: protocol.SharedMemoryLimits{MaxRegions: 4, MaxBytes: 1 << 20}}})
	ctx := context.Background()
	newObject(t, dir, "/sys", 8)
	in := be.Alloc(0, 2*imageBytes)
	out := be.Alloc(0, 4*classes)
	spare := be.Alloc(1, 1<<20)
	small := be.Alloc(1, 64)
	unknown := be.Alloc(0, 8).Handle
	unknown[5] ^= 0xff // names no allocation
	setup := f.grpcClient(t)
	require.NoError(t, setup.RegisterCudaSharedMemory(ctx, "cin", in.Handle[:], 0, 2*imageBytes))
	require.NoError(t, setup.RegisterCudaSharedMemory(ctx, "cout", out.Handle[:], 0, 4*classes))
	require.NoError(t, setup.RegisterSystemSharedMemory(ctx, "sys", "/sys", 0, 8))

	register := func(name string, handle []byte, device int64, size uint64) func(cudaClient) error {
		return func(c cudaClient) error { return c.RegisterCudaSharedMemory(ctx, name, handle, device, size) }
	}
	infer := func(mod func(r *client.InferRequest)) func(cudaClient) error {
		return func(c cudaClient) error {
			r := cudaRequest(1, 0, 0)
			mod(r)
			_, err := c.Infer(ctx, r)
			return err
		}
	}
	tests := []struct {
		name   string
		call   func(cudaClient) error
		status int
		code   codes.Code
		msg    string
	}{
		{"unknown region", infer(func(r *client.InferRequest) { r.Inputs[0].Region.Name = "nope" }),
			404, codes.NotFound, `input input: unknown shared-memory region "nope" (register it first)`},
		{"byte size not the tensor's", infer(func(r *client.InferRequest) { r.Inputs[0].Region.ByteSize = 100 }),
			400, codes.InvalidArgument, "input input: shared_memory_byte_size 100, want 12288"},
		{"past the region's end", infer(func(r *client.InferRequest) { r.Inputs[0].Region.Offset = imageBytes + 4 }),
			400, codes.InvalidArgument, `CUDA shared-memory region "cin" holds 24576 bytes: shared_memory_offset 12292 + shared_memory_byte_size 12288 runs past its end`},
		{"output region too small", infer(func(r *client.InferRequest) { r.OutputRegions["logits"] = client.Region{Name: "cout", ByteSize: 4} }),
			400, codes.InvalidArgument, "output logits: shared_memory_byte_size 4 is too small: the tensor needs 20 bytes"},
		{"output past its region", infer(func(r *client.InferRequest) {
			r.OutputRegions["logits"] = client.Region{Name: "cout", Offset: 4, ByteSize: 4 * classes}
		}), 400, codes.InvalidArgument, `CUDA shared-memory region "cout" holds 20 bytes`},
		{"FP16 input", infer(func(r *client.InferRequest) {
			r.Inputs[0].Datatype = "FP16"
			r.Inputs[0].Region.ByteSize = imageBytes / 2
		}),
			400, codes.InvalidArgument, `input input: FP16 data in CUDA shared-memory region "cin": this server takes CUDA shared-memory input as FP32 only`},
		{"handle of 63 bytes", register("x", in.Handle[:63], 0, 8), 400, codes.InvalidArgument, `CUDA shared-memory region "x": raw_handle has 63 bytes, want 64 (a cudaIpcMemHandle_t)`},
		{"no handle", register("x", nil, 0, 8), 400, codes.InvalidArgument, "raw_handle has 0 bytes"},
		{"invalid handle", register("x", unknown[:], 0, 8), 400, codes.InvalidArgument, `CUDA shared-memory region "x": inference: opening a CUDA IPC memory handle of device 0: ` + fakegpu.ErrIPC.Error()},
		{"wrong device", register("x", spare.Handle[:], 0, 8), 400, codes.InvalidArgument, "the handle's memory is on device 1, not device 0"},
		{"no such device", register("x", spare.Handle[:], 2, 8), 400, codes.InvalidArgument, "device 2 is not one this engine runs on"},
		{"larger than the allocation", register("x", small.Handle[:], 1, 65), 400, codes.InvalidArgument, "65 bytes asked, the handle's allocation holds 64"},
		{"empty region", register("x", spare.Handle[:], 1, 0), 400, codes.InvalidArgument, "byte_size 0, want at least 1"},
		{"name taken by a CUDA region", register("cin", spare.Handle[:], 1, 8), 409, codes.AlreadyExists, `shared-memory region "cin" is already registered as CUDA shared memory`},
		{"name taken by a system region", register("sys", spare.Handle[:], 1, 8), 409, codes.AlreadyExists, `shared-memory region "sys" is already registered as system shared memory`},
		{"over the byte limit", register("x", spare.Handle[:], 1, 1<<20), 400, codes.ResourceExhausted, "would pass this server's limit of 1048576 bytes"},
		{"status of an unknown region", func(c cudaClient) error { _, err := c.CudaSharedMemoryStatus(ctx, "nope"); return err },
			404, codes.NotFound, `unknown CUDA shared-memory region "nope"`},
		{"CUDA status of a system region", func(c cudaClient) error { _, err := c.CudaSharedMemoryStatus(ctx, "sys"); return err },
			404, codes.NotFound, `shared-memory region "sys" is registered as system shared memory, not CUDA shared memory`},
		{"system status of a CUDA region", func(c cudaClient) error { _, err := c.SystemSharedMemoryStatus(ctx, "cin"); return err },
			404, codes.NotFound, `shared-memory region "cin" is registered as CUDA shared memory, not system shared memory`},
	}
	for _, tt := range tests {
		for name, c := range f.cudaClients(t) {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				assertAnswer(t, name, tt.call(c), tt.status, tt.code, tt.msg)
			})
		}
	}
	t.Run("negative device over gRPC", func(t *testing.T) {
		_, code, msg := answerOf(t, setup.RegisterCudaSharedMemory(ctx, "x", spare.Handle[:], -1, 8))
		assert.Equal(t, codes.InvalidArgument, code)
		assert.Contains(t, msg, "device_id -1, want a GPU's ordinal")
	})
	t.Run("region count limit", func(t *testing.T) {
		require.NoError(t, setup.RegisterCudaSharedMemory(ctx, "fourth", spare.Handle[:], 1, 8))
		_, code, msg := answerOf(t, setup.RegisterCudaSharedMemory(ctx, "fifth", spare.Handle[:], 1, 8))
		assert.Equal(t, codes.ResourceExhausted, code)
		assert.Contains(t, msg, "this server maps at most 4 regions, and 4 are mapped")
		require.NoError(t, setup.UnregisterCudaSharedMemory(ctx, "fourth"))
	})
	t.Run("unregistering an unknown region, or another kind's, is not an error", func(t *testing.T) {
		for _, c := range f.cudaClients(t) {
			assert.NoError(t, c.UnregisterCudaSharedMemory(ctx, "never-registered"))
			assert.NoError(t, c.UnregisterCudaSharedMemory(ctx, "sys"))
			assert.NoError(t, c.UnregisterSystemSharedMemory(ctx, "cin"))
		}
		st, err := setup.SystemSharedMemoryStatus(ctx, "sys")
		require.NoError(t, err)
		assert.Len(t, st, 1, "the system region is left alone")
		cst, err := setup.CudaSharedMemoryStatus(ctx, "")
		require.NoError(t, err)
		assert.Len(t, cst, 2, "the CUDA regions are left alone")
	})
	t.Run("a machine that forbids CUDA IPC", func(t *testing.T) {
		be.FailOpen(fmt.Errorf("cudadrv: cuIpcOpenMemHandle: CUDA_ERROR_INVALID_VALUE (1)"))
		defer be.FailOpen(nil)
		_, code, msg := answerOf(t, setup.RegisterCudaSharedMemory(ctx, "x", spare.Handle[:], 1, 8))
		assert.Equal(t, codes.InvalidArgument, code)
		assert.Contains(t, msg, `CUDA shared-memory region "x": inference: opening a CUDA IPC memory handle of device 1: cudadrv: cuIpcOpenMemHandle: CUDA_ERROR_INVALID_VALUE (1)`)
	})
}

func TestCudaSharedMemoryRegisterBodyIsChecked(t *testing.T) {
	f, be, _ := cudaFixture(t, fixtureOpts{})
	a := be.Alloc(0, 64)
	b64 := base64.StdEncoding.EncodeToString(a.Handle[:])
	register := "/v2/cudasharedmemory/region/r/register"
	for body, msg := range map[string]string{
		`{"device_id":0,"byte_size":8}`:                                                         `"raw_handle": {"b64": ...} missing`,
		`{"raw_handle":{},"device_id":0,"byte_size":8}`:                                         `"raw_handle": {"b64": ...} missing`,
		`{"raw_handle":{"b64":"` + b64 + `"},"byte_size":8}`:                                    `"device_id" missing`,
		`{"raw_handle":{"b64":"` + b64 + `"},"device_id":0}`:                                    `"byte_size" missing`,
		`{"raw_handle":{"b64":"` + b64 + `"},"device_id":-1,"byte_size":8}`:                     `"device_id" -1, want a non-negative integer`,
		`{"raw_handle":{"b64":"` + b64 + `"},"device_id":4294967296,"byte_size":8}`:             `"device_id" 4294967296, want a GPU's ordinal`,
		`{"raw_handle":{"b64":"` + b64 + `"},"device_id":0,"byte_size":1.5}`:                    `"byte_size" 1.5, want a non-negative integer`,
		`{"raw_handle":{"b64":"!!!!"},"device_id":0,"byte_size":8}`:                             "raw_handle.b64 is not base64",
		`{"raw_handle":{"b64":"` + strings.Repeat("A", 300) + `"},"device_id":0,"byte_size":8}`: "raw_handle.b64 has 300 characters; a 64-byte cudaIpcMemHandle_t takes 88",
		`{"raw_handle":{"b64":"QUJD"},"device_id":0,"byte_size":8}`:                             "raw_handle has 3 bytes, want 64",
		`{"raw_handle":{"b64":"` + b64 + `"},"device_id":0,"byte_size":8} {}`:                   "unexpected data after the JSON object",
		`[`: "invalid CUDA shared-memory registration JSON",
	} {
		a := send(t, f.http.URL, rawRequest{path: register, body: []byte(body)})
		assert.Equal(t, http.StatusBadRequest, a.status, body)
		assert.Contains(t, a.errMsg, msg, body)
	}
	// libb64, which Triton's C++ client (perf_analyzer's) encodes with, ends
	// lines after 72 characters and at the end: newlines are skipped.
	wrapped := b64[:72] + `\n` + b64[72:] + `\n`
	a2 := send(t, f.http.URL, rawRequest{path: register, body: []byte(`{"raw_handle":{"b64":"` + wrapped + `"},"device_id":0,"byte_size":64}`)})
	assert.Equal(t, http.StatusOK, a2.status, a2.errMsg)
	a2 = send(t, f.http.URL, rawRequest{method: http.MethodGet, path: register})
	assert.Equal(t, http.StatusMethodNotAllowed, a2.status)
	a2 = send(t, f.http.URL, rawRequest{method: http.MethodGet, path: "/v2/cudasharedmemory/register"})
	assert.Equal(t, http.StatusNotFound, a2.status, "register needs a region name")
	a2 = send(t, f.http.URL, rawRequest{method: http.MethodGet, path: "/v2/cudasharedmemory/region/r/status"})
	assert.Equal(t, http.StatusOK, a2.status)
	assert.JSONEq(t, `[{"name":"r","device_id":0,"byte_size":64}]`, string(a2.body))
}

// TestCudaUnregisterWhileInUse unregisters both CUDA regions of a request
// waiting at the compute gate: the names go at once, the request is answered
// with its logits in the (still mapped) output region, and the handles are
// unmapped only once it is answered.
func TestCudaUnregisterWhileInUse(t *testing.T) {
	g := newGate(cpu.New())
	be := fakegpu.Wrap(g, 1)
	f := newFixture(t, fixtureOpts{cfg: inference.Config{Backend: be}, opts: shmOn().opts})
	g.armed.Store(true)
	f.gate = g
	ctx := context.Background()
	c := f.grpcClient(t)
	in, out := be.Alloc(0, imageBytes), be.Alloc(0, 4*classes)
	require.NoError(t, c.RegisterCudaSharedMemory(ctx, "cin", in.Handle[:], 0, imageBytes))
	require.NoError(t, c.RegisterCudaSharedMemory(ctx, "cout", out.Handle[:], 0, 4*classes))
	images := randomImages(5, 1)
	putFloats(in.Bytes(), images)
	errs := make(chan error, 1)
	go func() { _, err := c.Infer(ctx, cudaRequest(1, 0, 0)); errs <- err }()
	require.Eventually(t, func() bool { return g.waiting.Load() == 1 }, 5*time.Second, time.Millisecond)

	require.NoError(t, c.UnregisterCudaSharedMemory(ctx, ""))
	st, err := c.CudaSharedMemoryStatus(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, st, "names removed at once")
	_, err = c.Infer(ctx, cudaRequest(1, 0, 0))
	_, code, _ := answerOf(t, err)
	assert.Equal(t, codes.NotFound, code, "a new request cannot use an unregistered region")
	assert.Equal(t, 2, be.Opened(), "still mapped while the request holds them")

	g.release()
	require.NoError(t, <-errs, "the request that held the regions is answered")
	assert.Equal(t, bits(f.inProcess(t, images)), bits(getFloats(out.Bytes(), classes)))
	require.Eventually(t, func() bool { return be.Opened() == 0 }, 5*time.Second, time.Millisecond, "unmapped after the answer")
}

func TestCudaSharedMemoryNeedsTheCudaBackend(t *testing.T) {
	f := newFixture(t, shmOn()) // the CPU back-end
	ctx := context.Background()
	for name, c := range f.cudaClients(t) {
		assertAnswer(t, name, c.RegisterCudaSharedMemory(ctx, "r", make([]byte, 64), 0, 8),
			http.StatusBadRequest, codes.Unimplemented, "CUDA shared memory needs the cuda back-end, and this server runs cpu; use system shared memory")
		st, err := c.CudaSharedMemoryStatus(ctx, "")
		require.NoError(t, err, name)
		assert.Empty(t, st, name)
		assert.NoError(t, c.UnregisterCudaSharedMemory(ctx, ""), name)
		md, err := c.ServerMetadata(ctx)
		require.NoError(t, err)
		assert.False(t, contains(md.Extensions, "cuda_shared_memory"), name)
	}
	a := send(t, f.http.URL, rawRequest{path: "/v2/cudasharedmemory/region/r/register", body: []byte(`{"raw_handle":{"b64":""},"device_id":0,"byte_size":8}`)})
	assert.Equal(t, http.StatusBadRequest, a.status)
	a = send(t, f.http.URL, rawRequest{method: http.MethodGet, path: "/v2/cudasharedmemory/status"})
	assert.Equal(t, http.StatusOK, a.status)
	assert.JSONEq(t, `[]`, string(a.body))

	for _, tt := range []struct {
		name   string
		limits protocol.SharedMemoryLimits
		want   bool
	}{{"supported", protocol.SharedMemoryLimits{Enabled: true}, true}, {"shared memory off", protocol.SharedMemoryLimits{}, false}} {
		t.Run(tt.name, func(t *testing.T) {
			be := fakegpu.Wrap(cpu.New(), 2)
			f := newFixture(t, fixtureOpts{cfg: inference.Config{Backend: be}, opts: protocol.Options{SharedMemory: tt.limits}})
			c := f.grpcClient(t)
			md, err := c.ServerMetadata(ctx)
			require.NoError(t, err)
			assert.Equal(t, tt.want, contains(md.Extensions, "cuda_shared_memory"))
			err = c.RegisterCudaSharedMemory(ctx, "r", be.Alloc(0, 8).Handle[:], 0, 8)
			if tt.want {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, "shared memory is turned off on this server")
			}
		})
	}
	// The raw gRPC service answers the same.
	_, err := f.grpcClient(t).API().CudaSharedMemoryRegister(ctx, &v2pb.CudaSharedMemoryRegisterRequest{Name: "r", RawHandle: make([]byte, 64)})
	assert.Equal(t, codes.Unimplemented, grpcstatus.Code(err))
}

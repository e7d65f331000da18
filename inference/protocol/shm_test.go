//go:build linux

package protocol_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/cpu"
	"github.com/inferbench/inferbench/inference/internal/half"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// Shared-memory objects live in a temporary directory that stands for
// /dev/shm: the server maps its files exactly as it maps /dev/shm's (the
// Python peer test uses the real /dev/shm).

const imageBytes = 4 * 3 * side * side

// shmFixture is a fixture with the shared-memory API on, whose
// shared-memory objects live in dir.
func shmFixture(t *testing.T, o fixtureOpts) (*fixture, string) {
	dir := t.TempDir()
	o.opts.SharedMemory.Dir = dir
	o.opts.SharedMemory.Enabled = true
	return newFixture(t, o), dir
}

// object is a client's shared-memory object: a file in the fixture's
// directory, written and read through the file (the page cache the server's
// mapping shares).
type object struct {
	t *testing.T
	f *os.File
}

func newObject(t *testing.T, dir, key string, size int) *object {
	f, err := os.OpenFile(filepath.Join(dir, strings.TrimLeft(key, "/")), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(int64(size)))
	t.Cleanup(func() { f.Close() })
	return &object{t: t, f: f}
}

func (o *object) writeFloats(off int, v []float32) {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	_, err := o.f.WriteAt(b, int64(off))
	require.NoError(o.t, err)
}

func (o *object) readFloats(off, n int) []float32 {
	b := make([]byte, 4*n)
	_, err := o.f.ReadAt(b, int64(off))
	require.NoError(o.t, err)
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// oneImageRegions makes objects /in (one image) and /out (its logits) in
// dir and registers them with c as regions "in" and "out".
func oneImageRegions(t *testing.T, c client.SharedMemory, dir string) (in, out *object) {
	t.Helper()
	in, out = newObject(t, dir, "/in", imageBytes), newObject(t, dir, "/out", 4*classes)
	ctx := context.Background()
	require.NoError(t, c.RegisterSystemSharedMemory(ctx, "in", "/in", 0, imageBytes))
	require.NoError(t, c.RegisterSystemSharedMemory(ctx, "out", "/out", 0, 4*classes))
	return in, out
}

// shmClients are the two transports' clients with their shared-memory API.
type shmClient interface {
	client.Client
	client.SharedMemory
}

func (f *fixture) shmClients(t *testing.T) map[string]shmClient {
	return map[string]shmClient{"http": f.httpClient(t, false), "grpc": f.grpcClient(t)}
}

// shmRequest asks for n images from region "in" at inOff and the logits in
// region "out" at outOff.
func shmRequest(n int, inOff, outOff int64) *client.InferRequest {
	return &client.InferRequest{
		Model: "resnet18",
		Inputs: []client.Tensor{{Name: "input", Datatype: "FP32", Shape: []int64{int64(n), 3, side, side},
			Region: &client.Region{Name: "in", Offset: inOff, ByteSize: int64(n * imageBytes)}}},
		OutputRegions: map[string]client.Region{"logits": {Name: "out", Offset: outOff, ByteSize: int64(4 * n * classes)}},
	}
}

func TestSharedMemoryInferenceEqualsInProcessBitForBit(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{})
	ctx := context.Background()
	// The input region starts 4096+8 bytes into its object and the tensor 16
	// bytes into the region; the logits go 64 bytes into theirs.
	in := newObject(t, dir, "/inputs", 8192+3*imageBytes)
	out := newObject(t, dir, "/outputs", 64+4*3*classes)
	for name, c := range f.shmClients(t) {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, c.RegisterSystemSharedMemory(ctx, "in", "/inputs", 4104, uint64(16+3*imageBytes)))
			require.NoError(t, c.RegisterSystemSharedMemory(ctx, "out", "/outputs", 0, uint64(64+4*3*classes)))
			defer func() { require.NoError(t, c.UnregisterSystemSharedMemory(ctx, "")) }()
			st, err := c.SystemSharedMemoryStatus(ctx, "")
			require.NoError(t, err)
			assert.Equal(t, []client.SharedMemoryRegion{
				{Name: "in", Key: "/inputs", Offset: 4104, ByteSize: uint64(16 + 3*imageBytes)},
				{Name: "out", Key: "/outputs", Offset: 0, ByteSize: uint64(64 + 4*3*classes)},
			}, st)
			for _, n := range []int{1, 3} {
				images := randomImages(uint64(10+n), n)
				in.writeFloats(4104+16, images)
				resp, err := c.Infer(ctx, shmRequest(n, 16, 64))
				require.NoError(t, err)
				o, err := resp.Output("logits")
				require.NoError(t, err)
				assert.Nil(t, o.Data, "logits in shared memory are not sent")
				assert.Equal(t, &client.Region{Name: "out", Offset: 64, ByteSize: int64(4 * n * classes)}, o.Region)
				assert.Equal(t, []int64{int64(n), classes}, o.Shape)
				assert.Equal(t, bits(f.inProcess(t, images)), bits(out.readFloats(64, n*classes)), "batch %d", n)
			}
		})
	}
}

// TestHTTPSharedMemoryOutputAnswerNamesNoParameters checks the JSON answer
// for an output written into shared memory: name, datatype and shape, and no
// data and no parameters, as Triton answers. Triton's C++ client (and so
// perf_analyzer) refuses an output whose parameters lack binary_data_size.
func TestHTTPSharedMemoryOutputAnswerNamesNoParameters(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{})
	c := f.httpClient(t, false)
	_, out := oneImageRegions(t, c, dir)
	body := fmt.Appendf(nil, `{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,%d,%d],"parameters":{"shared_memory_region":"in","shared_memory_byte_size":%d}}],`+
		`"outputs":[{"name":"logits","parameters":{"shared_memory_region":"out","shared_memory_byte_size":%d}}]}`, side, side, imageBytes, 4*classes)
	a := send(t, f.http.URL, rawRequest{path: "/v2/models/resnet18/infer", body: body})
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	assert.Empty(t, a.header.Get(protocol.HeaderContentLength))
	assert.JSONEq(t, fmt.Sprintf(`{"model_name":"resnet18","model_version":"1","outputs":[{"name":"logits","datatype":"FP32","shape":[1,%d]}]}`, classes), string(a.body))
	assert.Equal(t, bits(f.inProcess(t, make([]float32, imageBytes/4))), bits(out.readFloats(0, classes)))
}

// TestGRPCSharedMemoryOutputAnswerHasAnEmptyRawEntry checks the gRPC answer
// for an output written into shared memory: one empty raw_output_contents
// entry, as Triton sends; Triton's C++ client (and so perf_analyzer) indexes
// raw_output_contents by output and crashed on an answer with none.
func TestGRPCSharedMemoryOutputAnswerHasAnEmptyRawEntry(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{})
	c := f.grpcClient(t)
	ctx := context.Background()
	_, out := oneImageRegions(t, c, dir)
	region := func(name string, size int64) map[string]*v2pb.InferParameter {
		return map[string]*v2pb.InferParameter{
			"shared_memory_region":    {ParameterChoice: &v2pb.InferParameter_StringParam{StringParam: name}},
			"shared_memory_byte_size": {ParameterChoice: &v2pb.InferParameter_Int64Param{Int64Param: size}},
		}
	}
	resp, err := c.API().ModelInfer(ctx, &v2pb.ModelInferRequest{
		ModelName: "resnet18",
		Inputs:    []*v2pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 3, side, side}, Parameters: region("in", imageBytes)}},
		Outputs:   []*v2pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits", Parameters: region("out", 4*classes)}},
	})
	require.NoError(t, err)
	require.Len(t, resp.GetOutputs(), 1)
	assert.Equal(t, []int64{1, classes}, resp.GetOutputs()[0].GetShape())
	assert.Equal(t, [][]byte{{}}, resp.GetRawOutputContents())
	assert.Equal(t, bits(f.inProcess(t, make([]float32, imageBytes/4))), bits(out.readFloats(0, classes)))
}

// TestSharedMemoryInputIsUsedInPlace changes the input region while the
// request waits at the compute gate: the logits are those of the new data,
// so the front door never copied the input.
func TestSharedMemoryInputIsUsedInPlace(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{gated: true})
	ctx := context.Background()
	c := f.grpcClient(t)
	in, out := oneImageRegions(t, c, dir)
	before, after := randomImages(1, 1), randomImages(2, 1)
	in.writeFloats(0, before)
	errs := make(chan error, 1)
	go func() { _, err := c.Infer(ctx, shmRequest(1, 0, 0)); errs <- err }()
	require.Eventually(t, func() bool { return f.gate.waiting.Load() == 1 }, 5*time.Second, time.Millisecond)
	in.writeFloats(0, after)
	f.gate.release()
	require.NoError(t, <-errs)
	assert.Equal(t, bits(f.inProcess(t, after)), bits(out.readFloats(0, classes)))
}

func TestSharedMemoryFP16AndUINT8AreWidened(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{})
	ctx := context.Background()
	images := randomImages(5, 2)
	fp16 := make([]byte, 2*len(images))
	widened := make([]float32, len(images))
	for i, v := range images {
		h := half.FromFloat32(v)
		binary.LittleEndian.PutUint16(fp16[2*i:], h)
		widened[i] = half.ToFloat32(h)
	}
	u8 := make([]byte, len(images))
	for i := range u8 {
		u8[i] = byte(i * 7)
	}
	norm := hostNormalised(u8, protocol.ImageNet.Mean, protocol.ImageNet.Std)
	out := newObject(t, dir, "/out", 4*2*classes)
	c := f.httpClient(t, false)
	require.NoError(t, c.RegisterSystemSharedMemory(ctx, "out", "/out", 0, 4*2*classes))
	for _, tt := range []struct {
		datatype string
		data     []byte
		want     []float32
	}{{"FP16", fp16, widened}, {"UINT8", u8, norm}} {
		t.Run(tt.datatype, func(t *testing.T) {
			o := newObject(t, dir, "/"+tt.datatype, len(tt.data))
			_, err := o.f.WriteAt(tt.data, 0)
			require.NoError(t, err)
			require.NoError(t, c.RegisterSystemSharedMemory(ctx, tt.datatype, "/"+tt.datatype, 0, uint64(len(tt.data))))
			req := &client.InferRequest{Model: "resnet18",
				Inputs:        []client.Tensor{{Name: "input", Datatype: tt.datatype, Shape: []int64{2, 3, side, side}, Region: &client.Region{Name: tt.datatype, ByteSize: int64(len(tt.data))}}},
				OutputRegions: map[string]client.Region{"logits": {Name: "out", ByteSize: 4 * 2 * classes}}}
			_, err = c.Infer(ctx, req)
			require.NoError(t, err)
			assert.Equal(t, bits(f.inProcess(t, tt.want)), bits(out.readFloats(0, 2*classes)))
		})
	}
}

// answer is an error answer as both transports report it.
func answerOf(t *testing.T, err error) (int, codes.Code, string) {
	t.Helper()
	require.Error(t, err)
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	return ce.HTTPStatus, ce.Code, ce.Msg
}

// assertAnswer checks that err, from the client of transport ("http" or
// "grpc"), is the error answer with that transport's status or code whose
// message holds msg.
func assertAnswer(t *testing.T, transport string, err error, status int, code codes.Code, msg string) {
	t.Helper()
	gotStatus, gotCode, gotMsg := answerOf(t, err)
	if transport == "http" {
		assert.Equal(t, status, gotStatus)
	} else {
		assert.Equal(t, code, gotCode)
	}
	assert.Contains(t, gotMsg, msg)
}

func TestSharedMemoryErrorsNameWhatWasExpectedAndWhatCame(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{opts: protocol.Options{SharedMemory: protocol.SharedMemoryLimits{MaxRegions: 3, MaxBytes: 1 << 20}}})
	ctx := context.Background()
	newObject(t, dir, "/in", 2*imageBytes)
	newObject(t, dir, "/out", 4*classes)
	newObject(t, dir, "/spare", 1<<20)
	require.NoError(t, os.Symlink(filepath.Join(dir, "in"), filepath.Join(dir, "link")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "adir"), 0o700))
	setup := f.httpClient(t, false)
	require.NoError(t, setup.RegisterSystemSharedMemory(ctx, "in", "/in", 0, 2*imageBytes))
	require.NoError(t, setup.RegisterSystemSharedMemory(ctx, "out", "/out", 0, 4*classes))

	register := func(name, key string, off, size uint64) func(shmClient) error {
		return func(c shmClient) error { return c.RegisterSystemSharedMemory(ctx, name, key, off, size) }
	}
	infer := func(mod func(r *client.InferRequest)) func(shmClient) error {
		return func(c shmClient) error {
			r := shmRequest(1, 0, 0)
			mod(r)
			_, err := c.Infer(ctx, r)
			return err
		}
	}
	tests := []struct {
		name   string
		call   func(shmClient) error
		status int
		code   codes.Code
		msg    string
	}{
		{"unknown input region", infer(func(r *client.InferRequest) { r.Inputs[0].Region.Name = "nope" }),
			404, codes.NotFound, `input input: unknown shared-memory region "nope" (register it first)`},
		{"unknown output region", infer(func(r *client.InferRequest) {
			r.OutputRegions["logits"] = client.Region{Name: "gone", ByteSize: 4 * classes}
		}),
			404, codes.NotFound, `output logits: unknown shared-memory region "gone"`},
		{"byte size not the tensor's", infer(func(r *client.InferRequest) { r.Inputs[0].Region.ByteSize = 100 }),
			400, codes.InvalidArgument, "input input: shared_memory_byte_size 100, want 12288"},
		{"past the region's end", infer(func(r *client.InferRequest) { r.Inputs[0].Region.Offset = imageBytes + 4 }),
			400, codes.InvalidArgument, `shared-memory region "in" holds 24576 bytes: shared_memory_offset 12292 + shared_memory_byte_size 12288 runs past its end`},
		{"misaligned FP32", infer(func(r *client.InferRequest) { r.Inputs[0].Region.Offset = 2 }),
			400, codes.InvalidArgument, "data at byte 2 of shared-memory object \"/in\" is not 4-byte aligned"},
		{"output region too small", infer(func(r *client.InferRequest) { r.OutputRegions["logits"] = client.Region{Name: "out", ByteSize: 4} }),
			400, codes.InvalidArgument, "output logits: shared_memory_byte_size 4 is too small: the tensor needs 20 bytes"},
		{"output past its region", infer(func(r *client.InferRequest) {
			r.OutputRegions["logits"] = client.Region{Name: "out", Offset: 4, ByteSize: 4 * classes}
		}), 400, codes.InvalidArgument, `shared-memory region "out" holds 20 bytes`},
		{"unknown key", register("x", "/nothing", 0, 8), 400, codes.InvalidArgument, `key "/nothing": no such shared-memory object`},
		{"key with a slash", register("x", "/a/b", 0, 8), 400, codes.InvalidArgument, `shared-memory key "/a/b": want a POSIX shared-memory name`},
		{"key of a symbolic link", register("x", "/link", 0, 8), 400, codes.InvalidArgument, `key "/link": opening`},
		{"key of a directory", register("x", "/adir", 0, 8), 400, codes.InvalidArgument, `key "/adir"`},
		{"region past the object", register("x", "/out", 8, 16), 400, codes.InvalidArgument, `object "/out" holds 20 bytes: offset 8 + byte_size 16 runs past its end`},
		{"empty region", register("x", "/out", 0, 0), 400, codes.InvalidArgument, "byte_size 0, want at least 1"},
		{"name taken", register("in", "/out", 0, 4), 409, codes.AlreadyExists, `shared-memory region "in" is already registered`},
		{"over the byte limit", register("x", "/spare", 0, 1<<20), 400, codes.ResourceExhausted, "would pass this server's limit of 1048576 bytes"},
		{"status of an unknown region", func(c shmClient) error { _, err := c.SystemSharedMemoryStatus(ctx, "nope"); return err },
			404, codes.NotFound, `unknown system shared-memory region "nope"`},
	}
	for _, tt := range tests {
		for name, c := range f.shmClients(t) {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				assertAnswer(t, name, tt.call(c), tt.status, tt.code, tt.msg)
			})
		}
	}
	t.Run("region count limit", func(t *testing.T) {
		c := f.grpcClient(t)
		require.NoError(t, c.RegisterSystemSharedMemory(ctx, "third", "/spare", 0, 8))
		_, code, msg := answerOf(t, c.RegisterSystemSharedMemory(ctx, "fourth", "/spare", 8, 8))
		assert.Equal(t, codes.ResourceExhausted, code)
		assert.Contains(t, msg, "this server maps at most 3 regions, and 3 are mapped")
	})
	t.Run("unregistering an unknown region is not an error", func(t *testing.T) {
		for _, c := range f.shmClients(t) {
			assert.NoError(t, c.UnregisterSystemSharedMemory(ctx, "never-registered"))
		}
	})
}

func TestSharedMemoryRequestParametersAreChecked(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{})
	newObject(t, dir, "/in", imageBytes)
	require.NoError(t, f.httpClient(t, false).RegisterSystemSharedMemory(context.Background(), "in", "/in", 0, imageBytes))
	infer := "/v2/models/resnet18/infer"
	tensor := func(params string) []byte {
		return []byte(`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,32,32],"parameters":{` + params + `}}]}`)
	}
	tests := []struct {
		name string
		body []byte
		msg  string
	}{
		{"byte size without region", tensor(`"shared_memory_byte_size":12288`), "shared_memory_byte_size and shared_memory_offset need shared_memory_region"},
		{"region without byte size", tensor(`"shared_memory_region":"in"`), `shared_memory_region "in" without shared_memory_byte_size`},
		{"region not a string", tensor(`"shared_memory_region":7,"shared_memory_byte_size":12288`), `parameter "shared_memory_region" must be a region's name, got 7`},
		{"negative offset", tensor(`"shared_memory_region":"in","shared_memory_byte_size":12288,"shared_memory_offset":-4`), `"shared_memory_offset" must be a non-negative integer, got -4`},
		{"region and binary data", tensor(`"shared_memory_region":"in","shared_memory_byte_size":12288,"binary_data_size":12288`), `input "input" is in shared-memory region "in" and also has data or binary_data_size`},
		{"region at the request level", []byte(`{"inputs":[],"parameters":{"shared_memory_region":"in"}}`), `belongs to an input or an output, not to the request`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := send(t, f.http.URL, rawRequest{path: infer, body: tt.body})
			assert.Equal(t, http.StatusBadRequest, a.status)
			assert.Contains(t, a.errMsg, tt.msg)
		})
	}
	t.Run("register body", func(t *testing.T) {
		for body, msg := range map[string]string{
			`{"offset":0,"byte_size":8}`:               `"key" missing`,
			`{"key":"/in","offset":0}`:                 `"byte_size" missing`,
			`{"key":"/in","byte_size":-8}`:             `"byte_size" -8, want a non-negative integer`,
			`{"key":"/in","byte_size":8,"offset":1.5}`: `"offset" 1.5, want a non-negative integer`,
			`{"key":"/in","byte_size":8} {}`:           "unexpected data after the JSON object",
			`[`:                                        "invalid shared-memory registration JSON",
		} {
			a := send(t, f.http.URL, rawRequest{path: "/v2/systemsharedmemory/region/r/register", body: []byte(body)})
			assert.Equal(t, http.StatusBadRequest, a.status, body)
			assert.Contains(t, a.errMsg, msg, body)
		}
		a := send(t, f.http.URL, rawRequest{method: http.MethodGet, path: "/v2/systemsharedmemory/region/r/register"})
		assert.Equal(t, http.StatusMethodNotAllowed, a.status)
		a = send(t, f.http.URL, rawRequest{method: http.MethodGet, path: "/v2/systemsharedmemory/register"})
		assert.Equal(t, http.StatusNotFound, a.status, "register needs a region name")
	})
}

// TestUnregisterWhileInUse unregisters both regions of a request waiting at
// the compute gate: the names go at once, the request is answered with its
// logits in the (still mapped) output region, and the regions' budget comes
// back only when it is answered.
func TestUnregisterWhileInUse(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{gated: true, opts: protocol.Options{SharedMemory: protocol.SharedMemoryLimits{MaxRegions: 2}}})
	ctx := context.Background()
	c := f.grpcClient(t)
	in, out := oneImageRegions(t, c, dir)
	images := randomImages(3, 1)
	in.writeFloats(0, images)
	errs := make(chan error, 1)
	go func() { _, err := c.Infer(ctx, shmRequest(1, 0, 0)); errs <- err }()
	require.Eventually(t, func() bool { return f.gate.waiting.Load() == 1 }, 5*time.Second, time.Millisecond)

	require.NoError(t, c.UnregisterSystemSharedMemory(ctx, ""))
	st, err := c.SystemSharedMemoryStatus(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, st, "names removed at once")
	_, err = c.Infer(ctx, shmRequest(1, 0, 0))
	_, code, _ := answerOf(t, err)
	assert.Equal(t, codes.NotFound, code, "a new request cannot use an unregistered region")
	_, code, msg := answerOf(t, c.RegisterSystemSharedMemory(ctx, "again", "/in", 0, imageBytes))
	assert.Equal(t, codes.ResourceExhausted, code, "both regions are still mapped: %s", msg)

	f.gate.release()
	require.NoError(t, <-errs, "the request that held the regions is answered")
	assert.Equal(t, bits(f.inProcess(t, images)), bits(out.readFloats(0, classes)))
	require.Eventually(t, func() bool {
		return c.RegisterSystemSharedMemory(ctx, "again", "/in", 0, imageBytes) == nil
	}, 5*time.Second, time.Millisecond, "the budget comes back once the mapping is undone")
}

// recorder is the CPU back-end whose engine records RegisterHost and its
// undoing, with the server's answers in between.
type recorder struct {
	backend.Backend
	mu     sync.Mutex
	events []string
	fail   error // RegisterHost's answer, when set
}

func (r *recorder) log(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	e, err := r.Backend.Open(m, opts)
	return recordingEngine{Engine: e, r: r}, err
}

type recordingEngine struct {
	backend.Engine
	r *recorder
}

func (e recordingEngine) RegisterHost(p []byte) (func() error, error) {
	e.r.log("register")
	if e.r.fail != nil {
		return nil, e.r.fail
	}
	return func() error { e.r.log("unregister"); return nil }, nil
}

// A region the back-end cannot page-lock (CUDA refuses some mappings) is
// still served, through the back-end's ordinary copies, and the refusal is
// logged, not answered as an error.
func TestRegionTheBackendCannotPinStillServes(t *testing.T) {
	rec := &recorder{Backend: cpu.New(), fail: errors.New("page-locking refused")}
	var logged bytes.Buffer
	f, dir := shmFixture(t, fixtureOpts{cfg: inference.Config{Backend: rec}, opts: protocol.Options{Log: slog.New(slog.NewTextHandler(&logged, nil))}})
	ctx := context.Background()
	c := f.grpcClient(t)
	in, out := oneImageRegions(t, c, dir)
	images := randomImages(4, 1)
	in.writeFloats(0, images)
	_, err := c.Infer(ctx, shmRequest(1, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, bits(f.inProcess(t, images)), bits(out.readFloats(0, classes)))
	assert.Contains(t, logged.String(), "without page-locking")
	assert.Contains(t, logged.String(), "page-locking refused")
	require.NoError(t, f.svc.Close())
	assert.Equal(t, []string{"register", "register"}, rec.events, "nothing to undo for regions never page-locked")
}

func TestRegionsAreRegisteredWithTheBackendOnceAndUndoneAfterTheirLastRequest(t *testing.T) {
	rec := &recorder{Backend: cpu.New()}
	f, dir := shmFixture(t, fixtureOpts{cfg: inference.Config{Backend: rec}})
	ctx := context.Background()
	c := f.httpClient(t, false)
	oneImageRegions(t, c, dir)
	for range 3 {
		_, err := c.Infer(ctx, shmRequest(1, 0, 0))
		require.NoError(t, err)
	}
	rec.log("answered")
	require.NoError(t, c.UnregisterSystemSharedMemory(ctx, "in"))
	require.NoError(t, f.svc.Close(), "Close unregisters what is left")
	assert.Equal(t, []string{"register", "register", "answered", "unregister", "unregister"}, rec.events)
}

func TestSharedMemoryExtensionCanBeTurnedOff(t *testing.T) {
	for _, tt := range []struct {
		name    string
		enabled bool
	}{{"on", true}, {"off (the default)", false}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			f := newFixture(t, fixtureOpts{opts: protocol.Options{SharedMemory: protocol.SharedMemoryLimits{Enabled: tt.enabled, Dir: dir}}})
			newObject(t, dir, "/in", 8)
			for name, c := range f.shmClients(t) {
				md, err := c.ServerMetadata(context.Background())
				require.NoError(t, err)
				assert.Equal(t, tt.enabled, contains(md.Extensions, "system_shared_memory"), name)
				err = c.RegisterSystemSharedMemory(context.Background(), "r-"+name, "/in", 0, 8)
				if tt.enabled {
					assert.NoError(t, err, name)
				} else {
					assert.ErrorContains(t, err, "system shared memory is turned off on this server", name)
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

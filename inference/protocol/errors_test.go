package protocol_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/protocol"
)

// rawRequest is an HTTP request built by hand, to send what no client would.
type rawRequest struct {
	method, path string
	header       map[string]string
	body         []byte
}

type rawAnswer struct {
	status int
	header http.Header
	body   []byte
	errMsg string // the {"error": ...} message, if the body is one
}

func send(t *testing.T, base string, r rawRequest) rawAnswer {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	req, err := http.NewRequest(r.method, base+r.path, bytes.NewReader(r.body))
	require.NoError(t, err)
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := rawAnswer{status: resp.StatusCode, header: resp.Header, body: b}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		a.errMsg = e.Error
	}
	return a
}

// jsonInfer is the body of a JSON inference request for one input.
func jsonInfer(name, datatype string, shape []int64, data any, extra string) []byte {
	d, _ := json.Marshal(data)
	s, _ := json.Marshal(shape)
	return fmt.Appendf(nil, `{"inputs":[{"name":%q,"datatype":%q,"shape":%s,"data":%s}]%s}`, name, datatype, s, d, extra)
}

// binaryInfer is a binary-extension request: header JSON, then data.
func binaryInfer(shape []int64, declared int, data []byte) rawRequest {
	s, _ := json.Marshal(shape)
	head := fmt.Appendf(nil, `{"inputs":[{"name":"input","datatype":"FP32","shape":%s,"parameters":{"binary_data_size":%d}}]}`, s, declared)
	return rawRequest{
		path:   "/v2/models/resnet18/infer",
		header: map[string]string{protocol.HeaderContentLength: strconv.Itoa(len(head))},
		body:   append(head, data...),
	}
}

func TestHTTPErrorsNameWhatWasExpectedAndWhatCame(t *testing.T) {
	f := newFixture(t, fixtureOpts{opts: protocol.Options{MaxBodyBytes: 64 << 10}})
	img := 3 * side * side
	ones := make([]float32, img)
	okShape := []int64{1, 3, side, side}
	good := make([]byte, 4*img)
	infer := "/v2/models/resnet18/infer"
	cases := []struct {
		name   string
		req    rawRequest
		status int
		msg    []string // substrings of the error message
	}{
		{"wrong height", rawRequest{path: infer, body: jsonInfer("input", "FP32", []int64{1, 3, 33, side}, ones, "")}, 400,
			[]string{"shape [1 3 33 32]", "want [-1 3 32 32]"}},
		{"rank 3", rawRequest{path: infer, body: jsonInfer("input", "FP32", []int64{3, side, side}, ones, "")}, 400,
			[]string{"rank 3", "want [-1 3 32 32]"}},
		{"batch above MaxBatch", rawRequest{path: infer, body: jsonInfer("input", "FP32", []int64{9, 3, side, side}, ones, "")}, 400,
			[]string{"batch 9 outside 1..8"}},
		{"datatype", rawRequest{path: infer, body: jsonInfer("input", "INT32", okShape, ones, "")}, 400,
			[]string{`datatype "INT32" not supported`, "FP32, FP16 or UINT8"}},
		{"input name", rawRequest{path: infer, body: jsonInfer("image", "FP32", okShape, ones, "")}, 400,
			[]string{`unexpected input "image"`, `"input"`}},
		{"too few values", rawRequest{path: infer, body: jsonInfer("input", "FP32", okShape, slices.Repeat([]float32{0.125}, 1100), "")}, 400,
			[]string{"has 1100 elements, want 3072"}},
		{"data too short for the shape", rawRequest{path: infer, body: jsonInfer("input", "FP32", okShape, ones[:10], "")}, 400,
			[]string{"data of 21 bytes cannot hold the 3072 values of shape [1 3 32 32]"}},
		{"nested unlike the shape", rawRequest{path: infer, body: jsonInfer("input", "FP32", okShape, [][]float32{ones[:1536], ones[:1536]}, "")}, 400,
			[]string{"nested 2 deep", "[1 3 32 32]"}},
		{"not a number", rawRequest{path: infer, body: jsonInfer("input", "FP32", okShape, append([]any{"x"}, make([]any, img-1)...), "")}, 400,
			[]string{`element 0: "\"x\"" is not a JSON number`}},
		{"uint8 out of range", rawRequest{path: infer, body: jsonInfer("input", "UINT8", okShape, append([]int{256}, make([]int, img-1)...), "")}, 400,
			[]string{"256", "not a UINT8"}},
		{"fp16 as JSON", rawRequest{path: infer, body: jsonInfer("input", "FP16", okShape, ones, "")}, 400,
			[]string{"FP16 data must be sent as binary"}},
		{"unknown output", rawRequest{path: infer, body: jsonInfer("input", "FP32", okShape, ones, `,"outputs":[{"name":"probs"}]`)}, 400,
			[]string{`unknown output "probs"`, `"logits"`}},
		{"shared memory", rawRequest{path: infer, body: jsonInfer("input", "FP32", okShape, ones, `,"parameters":{"shared_memory_region":"r"}`)}, 400,
			[]string{`"shared_memory_region" belongs to an input or an output, not to the request`}},
		{"invalid JSON", rawRequest{path: infer, body: []byte(`{"inputs":[`)}, 400,
			[]string{"invalid inference request JSON"}},
		{"binary without header", rawRequest{path: infer, body: binaryInfer(okShape, 4*img, good).body}, 400,
			[]string{"after the inference request JSON", protocol.HeaderContentLength}},
		{"binary size", binaryInfer(okShape, 4*img-4, good[:4*img-4]), 400,
			[]string{"binary_data_size 12284, want 12288"}},
		{"binary truncated", binaryInfer(okShape, 4*img, good[:100]), 400,
			[]string{"ended early"}},
		{"binary trailing bytes", binaryInfer(okShape, 4*img, append(good, 1, 2, 3)), 400,
			[]string{"continues after the 12288 bytes"}},
		{"header length beyond body", rawRequest{path: infer, header: map[string]string{protocol.HeaderContentLength: "999999"}, body: []byte(`{}`)}, 400,
			[]string{protocol.HeaderContentLength}},
		{"body over the limit", rawRequest{path: infer, body: jsonInfer("input", "FP32", []int64{8, 3, side, side}, randomImages(1, 8), "")}, 413,
			[]string{"larger than the limit of 65536 bytes"}},
		{"compressed", rawRequest{path: infer, header: map[string]string{"Content-Encoding": "gzip"}, body: []byte("x")}, 415,
			[]string{`Content-Encoding "gzip"`}},
		{"GET on infer", rawRequest{method: http.MethodGet, path: infer}, 405, []string{"POST"}},
		{"unknown model", rawRequest{path: "/v2/models/resnet50/infer", body: jsonInfer("input", "FP32", okShape, ones, "")}, 404,
			[]string{`unknown model "resnet50"`, `"resnet18"`}},
		{"unknown version", rawRequest{path: "/v2/models/resnet18/versions/2/infer", body: jsonInfer("input", "FP32", okShape, ones, "")}, 404,
			[]string{`unknown version "2"`}},
		{"unknown endpoint", rawRequest{method: http.MethodGet, path: "/v2/models/resnet18/labels"}, 404, []string{"no such endpoint"}},
		{"not v2", rawRequest{method: http.MethodGet, path: "/v1/models/resnet18"}, 404, []string{"under /v2"}},
	}
	before := f.srv.Stats()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := send(t, f.http.URL, tc.req)
			assert.Equal(t, tc.status, a.status, "status; body %s", a.body)
			assert.Equal(t, "application/json", a.header.Get("Content-Type"))
			require.NotEmpty(t, a.errMsg, "body %q is not {\"error\": ...}", a.body)
			for _, m := range tc.msg {
				assert.Contains(t, a.errMsg, m)
			}
		})
	}
	after := f.srv.Stats()
	assert.Equal(t, before.Accepted, after.Accepted, "no malformed request reaches the inference server")

	// The server still answers a good request on the same transport.
	resp, err := f.httpClient(t, false).Infer(context.Background(), inferRequest(randomImages(1, 1)))
	require.NoError(t, err)
	assert.Len(t, logitsOf(t, resp), classes)
}

func TestHealthIsEmpty200Or400(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/v2/health/live", 200}, {"/v2/health/ready", 200},
		{"/v2/models/resnet18/ready", 200}, {"/v2/models/resnet18/versions/1/ready", 200},
		{"/v2/models/resnet50/ready", 400}, {"/v2/models/resnet18/versions/9/ready", 400},
	} {
		a := send(t, f.http.URL, rawRequest{method: http.MethodGet, path: tc.path})
		assert.Equal(t, tc.status, a.status, tc.path)
		assert.Empty(t, a.body, tc.path)
	}
}

// TestMetadataHEADHasTheGETHeadersAndNoBody checks HEAD on a metadata
// endpoint: GET's status, type and length, and no body.
func TestMetadataHEADHasTheGETHeadersAndNoBody(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	for _, path := range []string{"/v2", "/v2/models/resnet18"} {
		get := send(t, f.http.URL, rawRequest{method: http.MethodGet, path: path})
		head := send(t, f.http.URL, rawRequest{method: http.MethodHead, path: path})
		require.Equal(t, http.StatusOK, get.status, path)
		assert.Equal(t, http.StatusOK, head.status, path)
		assert.Equal(t, "application/json", head.header.Get("Content-Type"), path)
		assert.Equal(t, strconv.Itoa(len(get.body)), head.header.Get("Content-Length"), path)
		assert.Empty(t, head.body, path)
	}
}

func TestGRPCStatusCodes(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	c := f.grpcClient(t)
	ctx := context.Background()
	code := func(err error) codes.Code {
		var ce *client.Error
		require.ErrorAs(t, err, &ce)
		return ce.Code
	}
	bad := inferRequest(randomImages(1, 1))
	bad.Inputs[0].Shape = []int64{1, 3, side, side + 1}
	_, err := c.Infer(ctx, bad)
	assert.Equal(t, codes.InvalidArgument, code(err))
	assert.Contains(t, err.Error(), "want [-1 3 32 32]")

	short := inferRequest(randomImages(1, 1))
	short.Inputs[0].Data = short.Inputs[0].Data[:100]
	_, err = c.Infer(ctx, short)
	assert.Equal(t, codes.InvalidArgument, code(err))
	assert.Contains(t, err.Error(), "100 bytes of raw contents, want 12288")

	unknown := inferRequest(randomImages(1, 1))
	unknown.Model = "resnet50"
	_, err = c.Infer(ctx, unknown)
	assert.Equal(t, codes.NotFound, code(err))
	_, err = c.ModelReady(ctx, "resnet50", "")
	assert.Equal(t, codes.NotFound, code(err))
}

// busy fills the gated server's single worker and queue: one request computing
// (blocked at the gate) and queue requests waiting. It returns when they are
// in place; the calls' errors arrive on the returned channel.
func busy(t *testing.T, f *fixture, queued int) <-chan error {
	t.Helper()
	errs := make(chan error, queued+1)
	in := inference.Tensor{Shape: []int{1, 3, side, side}, Data: randomImages(1, 1)}
	go func() { _, err := f.srv.Infer(context.Background(), in); errs <- err }()
	require.Eventually(t, func() bool { return f.gate.waiting.Load() == 1 }, 5*time.Second, time.Millisecond)
	for i := 0; i < queued; i++ {
		go func() { _, err := f.srv.Infer(context.Background(), in); errs <- err }()
	}
	require.Eventually(t, func() bool { return f.srv.Stats().Queued == queued }, 5*time.Second, time.Millisecond)
	return errs
}

func TestQueueFullIs503WithRetryAfterAndResourceExhausted(t *testing.T) {
	f := newFixture(t, fixtureOpts{gated: true, cfg: inference.Config{MaxQueue: 1, QueuePolicy: inference.Reject}})
	errs := busy(t, f, 1)
	a := send(t, f.http.URL, rawRequest{path: "/v2/models/resnet18/infer", body: jsonInfer("input", "FP32", []int64{1, 3, side, side}, make([]float32, 3*side*side), "")})
	assert.Equal(t, http.StatusServiceUnavailable, a.status)
	assert.Equal(t, "1", a.header.Get("Retry-After"))
	assert.Contains(t, a.errMsg, "queue full")

	_, err := f.grpcClient(t).Infer(context.Background(), inferRequest(randomImages(1, 1)))
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, codes.ResourceExhausted, ce.Code)

	f.gate.release()
	for i := 0; i < 2; i++ {
		require.NoError(t, <-errs)
	}
}

func TestDeadlinesAndTimeouts(t *testing.T) {
	f := newFixture(t, fixtureOpts{gated: true})
	errs := busy(t, f, 0)
	before := f.srv.Stats()

	// A gRPC deadline is the request's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := f.grpcClient(t).Infer(ctx, inferRequest(randomImages(1, 1)))
	cancel()
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, codes.DeadlineExceeded, ce.Code)

	// Triton's "timeout" parameter (microseconds) over HTTP: 504.
	a := send(t, f.http.URL, rawRequest{path: "/v2/models/resnet18/infer",
		body: jsonInfer("input", "FP32", []int64{1, 3, side, side}, make([]float32, 3*side*side), `,"parameters":{"timeout":20000}`)})
	assert.Equal(t, http.StatusGatewayTimeout, a.status, string(a.body))
	assert.Contains(t, a.errMsg, "deadline exceeded")

	f.gate.release()
	require.NoError(t, <-errs)
	// The HTTP request expired on the server's clock. The gRPC one did too,
	// unless the client's own cancellation at its deadline reached the server
	// first; either way it is counted.
	require.Eventually(t, func() bool {
		st := f.srv.Stats()
		return st.Expired-before.Expired >= 1 && (st.Expired-before.Expired)+(st.Cancelled-before.Cancelled) == 2
	}, 5*time.Second, time.Millisecond, "both requests counted in Stats as expired (or cancelled by the client at its deadline)")
}

func TestClientThatLeavesCancelsItsRequest(t *testing.T) {
	for _, transport := range []string{"http", "grpc"} {
		t.Run(transport, func(t *testing.T) {
			f := newFixture(t, fixtureOpts{gated: true})
			errs := busy(t, f, 0)
			before := f.srv.Stats()
			var c client.Client = f.grpcClient(t)
			if transport == "http" {
				c = f.httpClient(t, false)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { _, err := c.Infer(ctx, inferRequest(randomImages(2, 1))); done <- err }()
			require.Eventually(t, func() bool { return f.srv.Stats().Queued == 1 }, 5*time.Second, time.Millisecond)
			cancel()
			require.Error(t, <-done)
			// The server drops the request while the worker is still busy.
			require.Eventually(t, func() bool {
				st := f.srv.Stats()
				return st.Cancelled-before.Cancelled == 1 && st.Queued == 0
			}, 5*time.Second, time.Millisecond, "the abandoned request is answered and counted as cancelled while queued")
			f.gate.release()
			require.NoError(t, <-errs)
			assert.Equal(t, before.Completed+1, f.srv.Stats().Completed, "only the busy request completed")
		})
	}
}

func TestDrainTurnsReadinessOffAndRefusesNewRequests(t *testing.T) {
	f := newFixture(t, fixtureOpts{gated: true})
	inFlight := make(chan error, 1)
	hc := f.httpClient(t, false)
	go func() { _, err := hc.Infer(context.Background(), inferRequest(randomImages(3, 1))); inFlight <- err }()
	require.Eventually(t, func() bool { return f.gate.waiting.Load() == 1 }, 5*time.Second, time.Millisecond)

	f.svc.Drain()
	for _, p := range []string{"/v2/health/ready", "/v2/models/resnet18/ready"} {
		assert.Equal(t, 400, send(t, f.http.URL, rawRequest{method: http.MethodGet, path: p}).status, p)
	}
	assert.Equal(t, 200, send(t, f.http.URL, rawRequest{method: http.MethodGet, path: "/v2/health/live"}).status)
	a := send(t, f.http.URL, rawRequest{path: "/v2/models/resnet18/infer", body: jsonInfer("input", "FP32", []int64{1, 3, side, side}, make([]float32, 3*side*side), "")})
	assert.Equal(t, http.StatusServiceUnavailable, a.status)
	assert.Equal(t, "1", a.header.Get("Retry-After"))
	assert.True(t, strings.Contains(a.errMsg, "shutting down"), a.errMsg)

	gc := f.grpcClient(t)
	ready, err := gc.Ready(context.Background())
	require.NoError(t, err)
	assert.False(t, ready)
	_, err = gc.Infer(context.Background(), inferRequest(randomImages(1, 1)))
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, codes.Unavailable, ce.Code)

	f.gate.release()
	require.NoError(t, <-inFlight, "the request accepted before Drain is answered")
}

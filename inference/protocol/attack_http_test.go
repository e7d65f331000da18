package protocol_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/resnet"
)

// Each attack on the HTTP front door sends a body of attackBytes (or
// declares one) and must leave the server's allocations, from the moment the
// request is handed to the handler until it is answered, within
// attackAllocBound: a fixed amount, whatever the body or its declarations
// say. TotalAlloc counts every byte allocated meanwhile, so it bounds the
// growth of the heap as well.
const (
	attackBytes      = 2 << 20
	attackAllocBound = 512 << 10
)

// repeatBody is a request body: head, then unit over and over up to n bytes
// in all, then tail. It counts the bytes the server read.
type repeatBody struct {
	head, unit, tail []byte
	n, off           int
	read             atomic.Int64
}

// newRepeatBody returns the body of head, whole units and tail that is
// closest to n bytes from below.
func newRepeatBody(head, unit, tail string, n int) *repeatBody {
	units := (n - len(head) - len(tail)) / len(unit)
	return &repeatBody{head: []byte(head), unit: []byte(unit), tail: []byte(tail), n: len(head) + units*len(unit) + len(tail)}
}

// short is the start of an answer, for a failure message.
func short(b *bytes.Buffer) string {
	if b.Len() > 200 {
		return b.String()[:200] + "..."
	}
	return b.String()
}

func (b *repeatBody) Read(p []byte) (int, error) {
	start := b.off
	for len(p) > 0 && b.off < b.n {
		var src []byte
		switch rest := b.n - b.off; {
		case b.off < len(b.head):
			src = b.head[b.off:]
		case rest <= len(b.tail):
			src = b.tail[len(b.tail)-rest:]
		default:
			k := (b.off - len(b.head)) % len(b.unit)
			src = b.unit[k:min(len(b.unit), k+rest-len(b.tail))]
		}
		c := copy(p, src)
		p, b.off = p[c:], b.off+c
	}
	b.read.Add(int64(b.off - start))
	if b.off == b.n {
		return b.off - start, io.EOF
	}
	return b.off - start, nil
}

// allocated returns the bytes allocated while f ran (runtime.MemStats's
// TotalAlloc), after a collection.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// serveAttack hands body to h as an inference request and returns the
// answer and the bytes allocated meanwhile.
func serveAttack(h http.Handler, body io.Reader, header map[string]string) (*httptest.ResponseRecorder, uint64) {
	r := httptest.NewRequest(http.MethodPost, "/v2/models/resnet18/infer", body)
	r.ContentLength = -1 // the body's length is unknown, as with chunked encoding
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	return w, allocated(func() { h.ServeHTTP(w, r) })
}

// TestJSONCountAttack sends request bodies that cost a decoder that reads
// everything before it counts up to a hundred times their size: thousands
// of empty inputs or outputs, a million parameters, a megabyte id, nesting
// without end, a string without end. Each is refused (413, or 400 for a
// string with a control character) after the bytes up to the first bound
// crossed, and allocates a fixed amount.
func TestJSONCountAttack(t *testing.T) {
	f := newFixture(t, fixtureOpts{opts: protocol.Options{MaxBodyBytes: 64 << 20}})
	h := f.svc.HTTPHandler()
	cases := []struct {
		name             string
		head, unit, tail string
		status           int
		msg              string
	}{
		{"inputs", `{"inputs":[`, `{},`, `{}]}`, 413, "more than 16 inputs"},
		{"outputs", `{"outputs":[`, `{},`, `{}]}`, 413, "more than 16 outputs"},
		{"request parameters", `{"parameters":{`, `"k":1,`, `"k":1}}`, 413, "more than 64 parameters"},
		{"tensor parameters", `{"inputs":[{"parameters":{`, `"k":1,`, `"k":1}}]}`, 413, "more than 64 parameters"},
		{"id", `{"id":"`, `<`, `"}`, 413, "more than 256 bytes in its id"},
		{"escaped id", `{"id":"`, `\u003c`, `"}`, 413, "more than 256 bytes in its id"},
		{"name", `{"inputs":[{"name":"`, `a`, `"}]}`, 413, "more than 1024 bytes in a string"},
		{"unknown field", `{"x":"`, `a`, `"}`, 413, "more than 1024 bytes in a string"},
		{"number", `{"parameters":{"k":1`, `0`, `}}`, 413, "more than 1024 bytes in a number"},
		{"shape", `{"inputs":[{"shape":[`, `1,`, `1]}]}`, 413, "more than 8 dimensions"},
		{"nesting", `{"x":`, `[`, `]}`, 413, "more than 8 levels of nesting"},
		{"nested data", `{"inputs":[{"data":`, `[`, `]}]}`, 413, "more than 8 levels of nesting"},
		{"parameter value", `{"parameters":{"k":[`, `{},`, `{}]}}`, 400, "want a boolean, number or string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := newRepeatBody(tc.head, tc.unit, tc.tail, attackBytes)
			w, alloc := serveAttack(h, body, nil)
			assert.Equal(t, tc.status, w.Code, "status; body %s", short(w.Body))
			assert.Contains(t, short(w.Body), tc.msg)
			assert.Less(t, alloc, uint64(attackAllocBound), "bytes allocated for a %d-byte body", attackBytes)
			assert.Less(t, body.read.Load(), int64(64<<10), "bytes read of %d", attackBytes)
		})
	}
}

// TestJSONDataShapeAttack sends JSON data of a few bytes for a tensor whose
// shape declares a batch of 224x224 images: it is refused before a buffer of
// the declared size is taken.
func TestJSONDataShapeAttack(t *testing.T) {
	const batch, hw = 64, 224 // a 38.5 MB input buffer
	for _, data := range []string{`[1]`, `[[[[1]]]]`, `null`} {
		t.Run(data, func(t *testing.T) {
			// A server of its own, so no idle buffer is left from another case.
			m, err := resnet.New(resnet.Tiny(), 1)
			require.NoError(t, err)
			srv, err := inference.New(inference.Config{Options: inference.Options{Height: hw, Width: hw, MaxBatch: batch}, BackendName: "nop", Model: m})
			require.NoError(t, err)
			model, err := protocol.NewModel(srv, protocol.ModelConfig{})
			require.NoError(t, err)
			svc := protocol.New(model, protocol.Options{})
			t.Cleanup(func() { svc.Close(); srv.Close() })
			body := fmt.Sprintf(`{"inputs":[{"name":"input","datatype":"FP32","shape":[%d,3,%d,%d],"data":%s}]}`, batch, hw, hw, data)
			w, alloc := serveAttack(svc.HTTPHandler(), strings.NewReader(body), nil)
			assert.Equal(t, http.StatusBadRequest, w.Code, "status; body %s", short(w.Body))
			assert.Less(t, alloc, uint64(attackAllocBound), "bytes allocated for a %d-byte body", len(body))
		})
	}
}

// TestDeclaredLengthAttack declares bodies far larger than what it sends
// (Content-Length and Inference-Header-Content-Length), sends a little, and
// waits: while the server waits for the rest, it has allocated for what came,
// not for what was declared.
func TestDeclaredLengthAttack(t *testing.T) {
	const declared = 1 << 30
	f := newFixture(t, fixtureOpts{opts: protocol.Options{MaxBodyBytes: 2 * declared}})
	h := f.svc.HTTPHandler()
	for _, header := range []map[string]string{nil, {protocol.HeaderContentLength: strconv.Itoa(declared)}} {
		t.Run(fmt.Sprint(header), func(t *testing.T) {
			pr, pw := io.Pipe()
			r := httptest.NewRequest(http.MethodPost, "/v2/models/resnet18/infer", pr)
			r.ContentLength = 2 * declared
			for k, v := range header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			var before, during runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			done := make(chan struct{})
			go func() {
				defer close(done)
				h.ServeHTTP(w, r)
			}()
			// A pipe's Write returns once the reader took the bytes: after
			// the second one, the server has parsed the first and waits for
			// more.
			_, err := pw.Write([]byte(`{"inputs":[{"name":"input",`))
			require.NoError(t, err)
			_, err = pw.Write([]byte(` `))
			require.NoError(t, err)
			runtime.ReadMemStats(&during)
			pw.CloseWithError(io.ErrUnexpectedEOF)
			<-done
			assert.Equal(t, http.StatusBadRequest, w.Code, "status; body %s", short(w.Body))
			assert.Less(t, during.TotalAlloc-before.TotalAlloc, uint64(attackAllocBound), "bytes allocated for a declared body of %d bytes", declared)
		})
	}
}

// TestBinaryClaimAttack declares binary tensor data of a full batch of
// 224x224 images and sends none of it, holding its buffer from the in-flight
// budget (one such batch, under the Reject policy): a second request that
// declares as much is refused with 503 and Retry-After before any buffer is
// taken for it.
func TestBinaryClaimAttack(t *testing.T) {
	const batch, hw = 64, 224
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	srv, err := inference.New(inference.Config{Options: inference.Options{Height: hw, Width: hw, MaxBatch: batch}, BackendName: "nop", Model: m, QueuePolicy: inference.Reject})
	require.NoError(t, err)
	model, err := protocol.NewModel(srv, protocol.ModelConfig{InflightBytes: 1}) // raised to one batch
	require.NoError(t, err)
	svc := protocol.New(model, protocol.Options{})
	t.Cleanup(func() { svc.Close(); srv.Close() })
	h := svc.HTTPHandler()
	head := fmt.Sprintf(`{"inputs":[{"name":"input","datatype":"FP32","shape":[%d,3,%d,%d],"parameters":{"binary_data_size":%d}}]}`, batch, hw, hw, 4*batch*3*hw*hw)
	header := map[string]string{protocol.HeaderContentLength: strconv.Itoa(len(head))}

	// The first request takes the budget and waits for its data.
	pr, pw := io.Pipe()
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w, _ := serveAttack(h, pr, header)
		first <- w
	}()
	_, err = pw.Write([]byte(head))
	require.NoError(t, err)
	_, err = pw.Write([]byte{0}) // taken once the buffer is, by the read of the data
	require.NoError(t, err)

	w, alloc := serveAttack(h, strings.NewReader(head), header)
	assert.Equal(t, http.StatusServiceUnavailable, w.Code, "status; body %s", short(w.Body))
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Less(t, alloc, uint64(attackAllocBound), "bytes allocated for a refused claim of %d bytes", 4*batch*3*hw*hw)

	pw.CloseWithError(io.ErrUnexpectedEOF)
	assert.Equal(t, http.StatusBadRequest, (<-first).Code)
}

// rawExchange writes req on a new connection to addr and returns the first
// status line of the answer.
func rawExchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, req)
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(line)
}

// TestExpectContinueOverLimitAttack announces a body over the limit and asks
// whether to send it (Expect: 100-continue): the answer is 413 at once,
// never 100 Continue, on every endpoint that takes a body.
func TestExpectContinueOverLimitAttack(t *testing.T) {
	const limit = 64 << 10
	f := newFixture(t, fixtureOpts{opts: protocol.Options{MaxBodyBytes: limit}})
	addr := strings.TrimPrefix(f.http.URL, "http://")
	for _, path := range []string{"/v2/models/resnet18/infer", "/v2/systemsharedmemory/region/r/register", "/v2/models/resnet50/infer"} {
		req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", path, limit+1)
		assert.Equal(t, "HTTP/1.1 413 Request Entity Too Large", rawExchange(t, addr, req), path)
	}
	// Within the limit, the client is told to go on.
	req := fmt.Sprintf("POST /v2/models/resnet18/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", limit)
	assert.Equal(t, "HTTP/1.1 100 Continue", rawExchange(t, addr, req))
}

// TestRequestIDAttack sends ids at and over the bound, and ids with
// characters that HTML escaping would change: an id within the bound comes
// back byte for byte as it was sent, in valid JSON; one over it is refused.
func TestRequestIDAttack(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	img := make([]float32, 3*side*side)
	infer := func(id string) rawAnswer {
		idJSON, err := json.Marshal(id)
		require.NoError(t, err)
		return send(t, f.http.URL, rawRequest{path: "/v2/models/resnet18/infer",
			body: jsonInfer("input", "FP32", []int64{1, 3, side, side}, img, `,"id":`+string(idJSON))})
	}
	for _, id := range []string{
		`<script>alert("x&y")</script>`, `<b>&amp;</b> 日本語`, "日本語 ü é \u2028 \t\n\\ \x01", strings.Repeat("<", protocol.DefaultMaxIDBytes),
		strings.Repeat("é", protocol.DefaultMaxIDBytes/2),
	} {
		a := infer(id)
		require.Equal(t, http.StatusOK, a.status, "body %s", a.body)
		require.True(t, json.Valid(a.body), "answer %q is not JSON", a.body)
		var got struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal(a.body, &got))
		assert.Equal(t, id, got.ID)
		if !strings.ContainsAny(id, "\"\\\x01\t\n\u2028") {
			assert.True(t, bytes.Contains(a.body, []byte(`"id":"`+id+`"`)), "id %q not echoed verbatim in %s", id, a.body)
		}
	}
	a := infer(strings.Repeat("<", protocol.DefaultMaxIDBytes+1))
	assert.Equal(t, http.StatusRequestEntityTooLarge, a.status)
	assert.Contains(t, a.errMsg, "more than 256 bytes in its id")

	// An error message quotes the request as it came, too.
	a = send(t, f.http.URL, rawRequest{method: http.MethodGet, path: "/v2/models/%3Cb%3E&"})
	assert.Equal(t, http.StatusNotFound, a.status)
	assert.Contains(t, string(a.body), `unknown model \"<b>&\"`)
}

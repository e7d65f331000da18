package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// attack is one row of the table: what one client does.
type attack struct {
	name, row string
	// conns says the attack fills the server's connection slots: below
	// scale 1 the server's -max-conns shrinks with the attack, to connsOver
	// fewer than it holds.
	conns bool
	// play runs the attack on t and returns the bytes it sent and what its
	// own check found (nil: held).
	play func(ctx context.Context, t *target) (sent int64, check error)
}

// target is the server under attack, with the probes taken while an attack
// holds its connections.
type target struct {
	*server
	scale    float64
	probes   int
	probeMax time.Duration
	probeErr error
}

// scaled is n times the scale, at least min.
func (t *target) scaled(n, least int) int { return max(least, int(float64(n)*t.scale)) }

// probeHTTP probes HTTP health three times, one after another.
func (t *target) probeHTTP() {
	for range 3 {
		d, err := probe(t.http, "/v2/health/live", 2*time.Second)
		t.record(d, err)
	}
}

// probeGRPC asks gRPC health (grpc.health.v1) three times on a new connection.
func (t *target) probeGRPC() {
	for range 3 {
		t0 := time.Now()
		err := func() error {
			cc, err := grpc.NewClient(t.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = grpc_health_v1.NewHealthClient(cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
			return err
		}()
		t.record(time.Since(t0), err)
	}
}

func (t *target) record(d time.Duration, err error) {
	t.probes++
	if err != nil {
		t.probeErr = errors.Join(t.probeErr, err)
		return
	}
	t.probeMax = max(t.probeMax, d)
}

var attacks = []*attack{
	{name: "grpc-announced-length", row: "1", play: grpcAnnounced},
	{name: "http-json-inputs", row: "2", play: jsonBody(`{"inputs":[`, `{}`, `]}`)},
	{name: "http-json-outputs", row: "2", play: jsonBody(`{"inputs":[],"outputs":[`, `{}`, `]}`)},
	{name: "http-json-parameters", row: "2", play: jsonParams},
	{name: "grpc-empty-inputs", row: "2", play: grpcEmptyInputs},
	{name: "http-long-id", row: "3", play: longID},
	{name: "http-idle-conns", row: "4", play: idleConns, conns: true},
	{name: "http-slow-bodies", row: "4", play: slowBodies, conns: true},
	{name: "grpc-pinging-conns", row: "4", play: pingingConns, conns: true},
	{name: "shm-other-process", row: "5", play: shmOther},
	{name: "h2-continuation-flood", row: "8", play: continuationFlood},
	{name: "http-expect-continue", row: "9", play: expectContinue},
	{name: "h2-stream-id-reuse", row: "10", play: streamReuse},
	{name: "malformed-conns-log", row: "11", play: malformedLogs},
}

func attackByName(n string) *attack {
	for _, a := range attacks {
		if a.name == n {
			return a
		}
	}
	return nil
}

const inferPath = "/inference.GRPCInferenceService/ModelInfer"

// model is the name the attacked server serves its model under (serve
// -model tiny), and httpInfer its HTTP inference path.
const (
	model     = "tiny"
	httpInfer = "/v2/models/" + model + "/infer"
)

// inferHead is the start of a ModelInferRequest for one input of shape
// [256,3,250,250] FP32.
func inferHead() []byte {
	var in []byte
	in = pbField(in, 1, 5, []byte("input"))
	in = pbField(in, 2, 4, []byte("FP32"))
	shape := []byte{0x80, 0x02, 3, 0xfa, 0x01, 0xfa, 0x01} // 256, 3, 250, 250 as varints
	in = pbField(in, 3, uint64(len(shape)), shape)
	var m []byte
	m = pbField(m, 1, uint64(len(model)), []byte(model))
	return pbField(m, 5, uint64(len(in)), in)
}

// grpcAnnounced: calls whose raw input announces a batch-256 tensor (192 MB)
// and whose bytes never come.
func grpcAnnounced(ctx context.Context, t *target) (int64, error) {
	h, err := dialH2(t.grpc)
	if err != nil {
		return 0, err
	}
	defer h.close()
	const raw = 256 * 3 * 250 * 250 * 4
	m := pbField(inferHead(), 7, raw, nil)
	for i := range t.scaled(64, 2) {
		id := uint32(2*i + 1)
		if err := h.open(id, h.grpcHeaders(inferPath), true, false); err != nil {
			return h.sent.load(), err
		}
		if err := h.data(id, grpcMessage(uint32(len(m)+raw), m), false, 5*time.Second); err != nil {
			break // the server refused the call: that is allowed
		}
	}
	time.Sleep(2 * time.Second) // let the server act on what it was told
	t.probeHTTP()
	return h.sent.load(), nil
}

// postRaw sends an HTTP/1.1 POST of body to path on a new connection and
// returns the status and the answer's length.
func postRaw(addr, path string, header map[string]string, body io.Reader, length int64) (status int, answer int64, sent int64, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	var hb strings.Builder
	fmt.Fprintf(&hb, "POST %s HTTP/1.1\r\nHost: attack\r\nContent-Length: %d\r\n", path, length)
	for k, v := range header {
		fmt.Fprintf(&hb, "%s: %s\r\n", k, v)
	}
	hb.WriteString("\r\n")
	cw := countWriter{c, &atomicInt{}}
	_, _ = io.WriteString(cw, hb.String())
	// Write and read at once: a server may answer before the body ends.
	werr := make(chan error, 1)
	go func() { _, err := io.Copy(cw, body); werr <- err }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, 0, cw.n.load(), err
	}
	answer, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.Close()
	<-werr
	return resp.StatusCode, answer, cw.n.load(), nil
}

// repeated is a reader of head, n copies of item separated by commas, tail.
func repeated(head, item, tail string, n int) (io.Reader, int64) {
	parts := []io.Reader{strings.NewReader(head)}
	one := strings.Repeat(item+",", 1<<14)
	full := n / (1 << 14)
	for range full {
		parts = append(parts, strings.NewReader(one))
	}
	rest := n - full*(1<<14)
	parts = append(parts, strings.NewReader(strings.Repeat(item+",", rest)), strings.NewReader(item+tail))
	return io.MultiReader(parts...), int64(len(head)+len(tail)) + int64(n+1)*int64(len(item)+1) - 1
}

// jsonBody: a 40 MB JSON request of empty objects in one array.
func jsonBody(head, item, tail string) func(context.Context, *target) (int64, error) {
	return func(ctx context.Context, t *target) (int64, error) {
		n := t.scaled(40<<20, 1<<16) / (len(item) + 1)
		body, length := repeated(head, item, tail, n)
		status, _, sent, err := postRaw(t.http, httpInfer, map[string]string{"Content-Type": "application/json"}, body, length)
		if err != nil {
			return sent, err
		}
		t.probeHTTP()
		if status == http.StatusOK {
			return sent, fmt.Errorf("status %d", status)
		}
		return sent, nil
	}
}

// jsonParams: a parameters map of a million keys.
func jsonParams(ctx context.Context, t *target) (int64, error) {
	n := 1 << 20 // 11 MB: cheap enough to play at full size at every scale
	var b bytes.Buffer
	b.WriteString(`{"parameters":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":0`, i)
	}
	b.WriteString(`},"inputs":[]}`)
	status, _, sent, err := postRaw(t.http, httpInfer, map[string]string{"Content-Type": "application/json"}, &b, int64(b.Len()))
	if err != nil {
		return sent, err
	}
	t.probeHTTP()
	if status == http.StatusOK {
		return sent, fmt.Errorf("status %d", status)
	}
	return sent, nil
}

// grpcEmptyInputs: a ModelInferRequest of five million empty inputs.
func grpcEmptyInputs(ctx context.Context, t *target) (int64, error) {
	h, err := dialH2(t.grpc)
	if err != nil {
		return 0, err
	}
	defer h.close()
	m := pbField(nil, 1, uint64(len(model)), []byte(model))
	n := 5_000_000 // 10 MB: played at full size at every scale
	m = append(m, bytes.Repeat([]byte{5<<3 | 2, 0}, n)...)
	if err := h.open(1, h.grpcHeaders(inferPath), true, false); err != nil {
		return h.sent.load(), err
	}
	_ = h.data(1, grpcMessage(uint32(len(m)), m), true, 30*time.Second) // a refusal may cut it short
	h.mu.Lock()
	for h.readErr == nil && !h.ended[1] {
		h.cond.Wait()
	}
	h.mu.Unlock()
	t.probeHTTP()
	return h.sent.load(), nil
}

// longID: a valid request whose id is 150 MB of '<'.
func longID(ctx context.Context, t *target) (int64, error) {
	idLen := t.scaled(150<<20, 1<<16)
	const data = 3 * 250 * 250 * 4
	head := `{"id":"` + strings.Repeat("<", idLen) + `","inputs":[{"name":"input","datatype":"FP32","shape":[1,3,250,250],"parameters":{"binary_data_size":` + strconv.Itoa(data) + `}}]}`
	body := io.MultiReader(strings.NewReader(head), bytes.NewReader(make([]byte, data)))
	status, answer, sent, err := postRaw(t.http, httpInfer, map[string]string{
		"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": strconv.Itoa(len(head))}, body, int64(len(head)+data))
	if err != nil {
		return sent, err
	}
	t.probeHTTP()
	if status == http.StatusOK && answer > int64(idLen)+1<<20 {
		return sent, fmt.Errorf("status 200 with a %d-byte answer to a %d-byte id", answer, idLen)
	}
	if status == http.StatusOK {
		return sent, fmt.Errorf("an id of %d bytes was accepted", idLen)
	}
	return sent, nil
}

// holdConns opens n connections to addr, each prepared by hello (which may
// fail past the server's limit: counted, not fatal), and returns them.
func holdConns(addr string, n int, hello func(net.Conn) error) (conns []net.Conn, sent int64, failed int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
				return
			}
			cw := &countConn{Conn: c}
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			err = hello(cw)
			_ = c.SetDeadline(time.Time{})
			mu.Lock()
			defer mu.Unlock()
			sent += cw.n
			if err != nil {
				failed++
			}
			conns = append(conns, c)
		}()
	}
	wg.Wait()
	return conns, sent, failed
}

// countConn counts what is written to a connection.
type countConn struct {
	net.Conn
	n int64
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n += int64(n)
	return n, err
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// connCount is how many connections the connection attacks hold: more than
// the server's -max-conns (see attack.conns).
func (t *target) connCount() int { return connCount(t.scale) }

func connCount(scale float64) int { return max(116, int(1100*scale)) }

// connsOver is how many more connections than serve's -max-conns the
// connection attacks hold: 1,100 against the default 1,024 at full scale,
// and as many over at any scale, more than the health reserve (16).
const connsOver = 1100 - 1024

// idleConns: 1,100 keep-alive connections that made one request and stay.
func idleConns(ctx context.Context, t *target) (int64, error) {
	conns, sent, _ := holdConns(t.http, t.connCount(), func(c net.Conn) error {
		if _, err := io.WriteString(c, "GET /v2/health/live HTTP/1.1\r\nHost: attack\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	})
	defer closeAll(conns)
	t.probeHTTP()
	return sent, nil
}

// slowBodies: 1,100 requests whose bodies never come.
func slowBodies(ctx context.Context, t *target) (int64, error) {
	conns, sent, _ := holdConns(t.http, t.connCount(), func(c net.Conn) error {
		_, err := io.WriteString(c, "POST "+httpInfer+" HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{")
		return err
	})
	defer closeAll(conns)
	time.Sleep(200 * time.Millisecond) // the server reads the headers
	t.probeHTTP()
	return sent, nil
}

// pingingConns: 1,100 gRPC connections that only PING.
func pingingConns(ctx context.Context, t *target) (int64, error) {
	settings := []byte{0, 0, 0, byte(http2.FrameSettings), 0, 0, 0, 0, 0}
	ping := []byte{0, 0, 8, byte(http2.FramePing), 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	hello := append(append([]byte(http2.ClientPreface), settings...), ping...)
	conns, sent, _ := holdConns(t.grpc, t.connCount(), func(c net.Conn) error {
		_, err := c.Write(hello)
		return err
	})
	defer closeAll(conns)
	time.Sleep(200 * time.Millisecond)
	for _, c := range conns {
		_, _ = c.Write(ping)
	}
	t.probeGRPC()
	t.probeHTTP()
	return sent + int64(len(conns)*len(ping)), nil
}

// shmOther: register, as system shared memory, an object of another
// process that it keeps private (mode 0600, a name without any prefix).
func shmOther(ctx context.Context, t *target) (int64, error) {
	name := fmt.Sprintf("attack-victim-%d", os.Getpid())
	path := filepath.Join("/dev/shm", name)
	want := bytes.Repeat([]byte{0x5a}, 4096)
	if err := os.WriteFile(path, want, 0o600); err != nil {
		return 0, err
	}
	defer os.Remove(path)
	body := fmt.Sprintf(`{"key":"/%s","offset":0,"byte_size":4096}`, name)
	status, _, sent, err := postRaw(t.http, "/v2/systemsharedmemory/region/victim/register", map[string]string{"Content-Type": "application/json"}, strings.NewReader(body), int64(len(body)))
	if err != nil {
		return sent, err
	}
	var check error
	if status == http.StatusOK {
		check = fmt.Errorf("another process's object was registered (status %d)", status)
		// Use it as the output of a request, as the attacker would.
		out := `{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,250,250],"parameters":{"binary_data_size":750000}}],"outputs":[{"name":"output","parameters":{"shared_memory_region":"victim","shared_memory_byte_size":4096}}]}`
		b := io.MultiReader(strings.NewReader(out), bytes.NewReader(make([]byte, 750000)))
		_, _, n, _ := postRaw(t.http, httpInfer, map[string]string{
			"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": strconv.Itoa(len(out))}, b, int64(len(out)+750000))
		sent += n
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		check = errors.Join(check, errors.New("the other process's bytes changed"))
	}
	t.probeHTTP()
	return sent, check
}

// continuationFlood: a header block that never ends, in empty CONTINUATION
// frames, for up to two seconds.
func continuationFlood(ctx context.Context, t *target) (int64, error) {
	h, err := dialH2(t.grpc)
	if err != nil {
		return 0, err
	}
	defer h.close()
	if err := h.open(1, h.grpcHeaders(inferPath)[:4], false, false); err != nil {
		return h.sent.load(), err
	}
	t0 := time.Now()
	_ = h.c.SetWriteDeadline(t0.Add(3 * time.Second)) // a server that stops reading is not an error
	for time.Since(t0) < 2*time.Second {
		if err := h.continuation(1); err != nil {
			break
		}
	}
	g, rerr := h.waitGoAway(time.Second)
	t.probeHTTP()
	if g == nil && rerr == nil {
		return h.sent.load(), errors.New("the connection stayed open through the flood")
	}
	h.mu.Lock()
	took := h.closedAt.Sub(t0)
	h.mu.Unlock()
	if g == nil && took > 2*time.Second {
		return h.sent.load(), fmt.Errorf("closed only after %v", took)
	}
	return h.sent.load(), nil
}

// expectContinue: a Content-Length past the body limit with Expect:
// 100-continue must be refused at once, with no 100 Continue.
func expectContinue(ctx context.Context, t *target) (int64, error) {
	c, err := net.DialTimeout("tcp", t.http, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	req := "POST " + httpInfer + " HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\nContent-Length: 4000000000\r\nExpect: 100-continue\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	t.probeHTTP()
	switch {
	case err != nil:
		return int64(len(req)), fmt.Errorf("no answer: %v", err)
	case strings.Contains(line, " 100 "):
		return int64(len(req)), fmt.Errorf("answered %q before refusing", strings.TrimSpace(line))
	case !strings.Contains(line, " 413 "):
		return int64(len(req)), fmt.Errorf("answered %q, want 413", strings.TrimSpace(line))
	}
	return int64(len(req)), nil
}

// streamReuse: a stream id lower than one already used is a connection
// error PROTOCOL_ERROR (RFC 9113, 5.1.1).
func streamReuse(ctx context.Context, t *target) (int64, error) {
	h, err := dialH2(t.grpc)
	if err != nil {
		return 0, err
	}
	defer h.close()
	const health = "/grpc.health.v1.Health/Check"
	if err := h.open(3, h.grpcHeaders(health), true, false); err != nil {
		return h.sent.load(), err
	}
	if err := h.data(3, grpcMessage(0, nil), true, 5*time.Second); err != nil {
		return h.sent.load(), err
	}
	if err := h.open(1, h.grpcHeaders(health), true, false); err != nil {
		return h.sent.load(), err
	}
	g, _ := h.waitGoAway(2 * time.Second)
	t.probeHTTP()
	if g == nil || g.ErrCode != http2.ErrCodeProtocol {
		return h.sent.load(), fmt.Errorf("no GOAWAY PROTOCOL_ERROR (got %v)", g)
	}
	return h.sent.load(), nil
}

// malformedLogs: a thousand connections that send garbage to the gRPC port.
func malformedLogs(ctx context.Context, t *target) (int64, error) {
	conns, sent, _ := holdConns(t.grpc, t.scaled(1000, 100), func(c net.Conn) error {
		if _, err := io.WriteString(c, "GARBAGE / HTTP/9.9\r\n\r\n0123456789abcdef0123456789"); err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, c) // until the server closes it (or the deadline)
		return nil
	})
	closeAll(conns)
	time.Sleep(200 * time.Millisecond)
	t.probeHTTP()
	if n := t.log.lines.load(); n > maxLogLines {
		return sent, fmt.Errorf("%d log lines for %d bad connections", n, t.scaled(1000, 100))
	}
	return sent, nil
}

// maxLogLines bounds the log lines a flood of bad connections may cost:
// the server's start-up lines and a rate-limited few.
const maxLogLines = 64

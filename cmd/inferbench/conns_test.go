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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inferbench/inferbench/inference/client"
)

// probeBound is the generous bound the connection tests put on a probe's
// answer; the requirement is 100 ms, which the tests log as measured.
const probeBound = 5 * time.Second

// filler holds one of the connections that fill a listener.
type filler func(t *testing.T, addr string) net.Conn

// idleHTTP makes one request and keeps the connection open, idle.
func idleHTTP(t *testing.T, addr string) net.Conn {
	c := dialT(t, addr)
	_, err := io.WriteString(c, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return c
}

// slowBodyHTTP starts an inference request whose body never comes.
func slowBodyHTTP(t *testing.T, addr string) net.Conn {
	c := dialT(t, addr)
	_, err := io.WriteString(c, "POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"inputs\":[")
	require.NoError(t, err)
	return c
}

// h2Conn opens an HTTP/2 connection with prior knowledge (as gRPC clients
// do), reading and dropping what the server sends.
func h2Conn(t *testing.T, addr string) (net.Conn, *http2.Framer) {
	c := dialT(t, addr)
	_, err := io.WriteString(c, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(c, nil)
	require.NoError(t, fr.WriteSettings())
	go io.Copy(io.Discard, c) //nolint:errcheck // ends when the connection does
	return c, fr
}

// pingingGRPC opens a gRPC connection that only pings, as a keepalive
// would.
func pingingGRPC(t *testing.T, addr string) net.Conn {
	c, fr := h2Conn(t, addr)
	require.NoError(t, fr.WritePing(false, [8]byte{1}))
	return c
}

// slowGRPC opens a ModelInfer call whose message announces 4 KiB and sends
// none of it: a call in progress.
func slowGRPC(t *testing.T, addr string) net.Conn {
	c, fr := h2Conn(t, addr)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
		{":path", "/inference.GRPCInferenceService/ModelInfer"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}))
	require.NoError(t, fr.WriteData(1, false, []byte{0, 0, 0, 0x10, 0}))
	return c
}

func dialT(t *testing.T, addr string) net.Conn {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestHealthAnswersWithEverySlotHeld (issue 35, item 3): with every one of
// -max-conns connections held by idle keep-alive, slow-body, pinging or
// busy gRPC clients, health over HTTP (on the HTTP and the metrics port)
// and over gRPC (grpc.health.v1 and ServerLive/ServerReady) is answered,
// on both gRPC servers; an inference call over HTTP is answered too (by a
// connection that replaced an idle one, or 503 from the reserve).
func TestHealthAnswersWithEverySlotHeld(t *testing.T) {
	const slots = 8
	for _, impl := range []string{"h2grpc", "grpc-go"} {
		t.Run(impl, func(t *testing.T) {
			s := startServer(t, "-backend", "nop", "-model", "tiny", "-size", "32x32", "-max-batch", "4",
				"-max-conns", fmt.Sprint(slots), "-grpc-server", impl)
			tests := []struct {
				name   string
				fill   filler
				target string // s.http or s.grpc
				probe  func(t *testing.T, s *server) (time.Duration, error)
				// idle: once past their grace, the fillers make room for
				// an inference call in full.
				idle bool
			}{
				{"idle keep-alive HTTP", idleHTTP, "http", probeHTTP, true},
				{"slow HTTP bodies", slowBodyHTTP, "http", probeHTTP, false},
				{"pinging gRPC", pingingGRPC, "grpc", probeGRPC, true},
				{"gRPC calls in progress", slowGRPC, "grpc", probeGRPC, false},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					addr := map[string]string{"http": s.http, "grpc": s.grpc}[tt.target]
					var held []net.Conn
					for range slots + 2 {
						held = append(held, tt.fill(t, addr))
					}
					for i := range 3 {
						took, err := tt.probe(t, s)
						require.NoError(t, err, "probe %d", i)
						assert.Less(t, took, probeBound, "probe %d", i)
						t.Logf("probe %d answered in %v", i, took)
					}
					if tt.idle {
						require.Eventually(t, func() bool { return inferServed(t, s, tt.target) == nil },
							30*time.Second, 50*time.Millisecond, "an idle connection made room for a call")
					}
					for _, c := range held {
						c.Close()
					}
				})
			}
		})
	}
}

// probeHTTP asks /v2/health/live and /ready on the HTTP port and the
// metrics port, and makes an inference call; it returns the slowest
// health answer.
func probeHTTP(t *testing.T, s *server) (time.Duration, error) {
	var slowest time.Duration
	for _, base := range []string{s.http, s.metrics} {
		for _, path := range []string{"/v2/health/live", "/v2/health/ready"} {
			ctx, cancel := context.WithTimeout(context.Background(), probeBound)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+base+path, nil)
			start := time.Now()
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
			took := time.Since(start)
			cancel()
			if err != nil {
				return 0, fmt.Errorf("GET %s%s: %w", base, path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return 0, fmt.Errorf("GET %s%s: %s", base, path, resp.Status)
			}
			slowest = max(slowest, took)
		}
	}
	hc, err := client.NewHTTP("http://"+s.http, client.HTTPOptions{})
	require.NoError(t, err)
	defer hc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), probeBound)
	defer cancel()
	_, err = hc.Infer(ctx, &client.InferRequest{Model: "tiny", Inputs: []client.Tensor{client.FP32("input", []int64{1, 3, 32, 32}, make([]float32, 3*32*32))}})
	var ce *client.Error
	if err != nil && !(errors.As(err, &ce) && ce.HTTPStatus == http.StatusServiceUnavailable) {
		return 0, fmt.Errorf("infer: %w", err)
	}
	return slowest, nil
}

// probeGRPC asks grpc.health.v1 Check, ServerLive and ServerReady, each
// on a new connection, as a prober does; it returns the slowest answer.
func probeGRPC(t *testing.T, s *server) (time.Duration, error) {
	var slowest time.Duration
	for _, call := range []struct {
		name string
		do   func(ctx context.Context, cc *grpc.ClientConn) error
	}{
		{"Check", func(ctx context.Context, cc *grpc.ClientConn) error {
			r, err := grpc_health_v1.NewHealthClient(cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
			if err == nil && r.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
				err = fmt.Errorf("status %v", r.GetStatus())
			}
			return err
		}},
		{"ServerLive", func(ctx context.Context, cc *grpc.ClientConn) error {
			gc, err := client.NewGRPC(s.grpc, client.GRPCOptions{})
			if err != nil {
				return err
			}
			defer gc.Close()
			live, err := gc.Live(ctx)
			if err == nil && !live {
				err = fmt.Errorf("not live")
			}
			return err
		}},
		{"ServerReady", func(ctx context.Context, cc *grpc.ClientConn) error {
			gc, err := client.NewGRPC(s.grpc, client.GRPCOptions{})
			if err != nil {
				return err
			}
			defer gc.Close()
			ready, err := gc.Ready(ctx)
			if err == nil && !ready {
				err = fmt.Errorf("not ready")
			}
			return err
		}},
	} {
		cc, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), probeBound)
		start := time.Now()
		err = call.do(ctx, cc)
		took := time.Since(start)
		cancel()
		cc.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", call.name, err)
		}
		slowest = max(slowest, took)
	}
	return slowest, nil
}

// TestFullListenerAnswersEveryRequest: three times -max-conns keep-alive
// clients in a closed loop each get every request answered, 200 or 503
// with Retry-After from the health reserve: no connection is closed under
// a request, in flight or about to be sent.
func TestFullListenerAnswersEveryRequest(t *testing.T) {
	const slots, clients, each = 4, 12, 20
	s := startServer(t, "-backend", "nop", "-model", "tiny", "-size", "32x32", "-max-batch", "4", "-max-conns", fmt.Sprint(slots))
	req := &client.InferRequest{Model: "tiny", Inputs: []client.Tensor{client.FP32("input", []int64{1, 3, 32, 32}, make([]float32, 3*32*32))}}
	type tally struct{ ok, refused int }
	results := make(chan tally, clients)
	errs := make(chan error, clients*each)
	for range clients {
		go func() {
			var n tally
			defer func() { results <- n }()
			hc, err := client.NewHTTP("http://"+s.http, client.HTTPOptions{MaxConnsPerHost: 1})
			if err != nil {
				errs <- err
				return
			}
			defer hc.Close()
			for range each {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := hc.Infer(ctx, req)
				cancel()
				var ce *client.Error
				switch {
				case err == nil:
					n.ok++
				case errors.As(err, &ce) && ce.HTTPStatus == http.StatusServiceUnavailable:
					n.refused++
				default:
					errs <- err
				}
			}
		}()
	}
	var total tally
	for range clients {
		n := <-results
		total.ok += n.ok
		total.refused += n.refused
	}
	close(errs)
	for err := range errs {
		t.Errorf("request not answered: %v", err)
	}
	t.Logf("%d answered 200, %d refused 503", total.ok, total.refused)
	assert.Equal(t, clients*each, total.ok+total.refused)
	assert.GreaterOrEqual(t, total.ok, slots*each, "the clients holding a place were served")
}

// inferServed makes one inference call over target's protocol on a new
// connection: nil if it was served.
func inferServed(t *testing.T, s *server, target string) error {
	req := &client.InferRequest{Model: "tiny", Inputs: []client.Tensor{client.FP32("input", []int64{1, 3, 32, 32}, make([]float32, 3*32*32))}}
	var c client.Client
	var err error
	if target == "http" {
		c, err = client.NewHTTP("http://"+s.http, client.HTTPOptions{})
	} else {
		c, err = client.NewGRPC(s.grpc, client.GRPCOptions{})
	}
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), probeBound)
	defer cancel()
	_, err = c.Infer(ctx, req)
	return err
}

// TestEvictedGRPCConnectionHearsGoAway: with -max-conns 1, a new gRPC
// connection replaces one idle past its grace, which is told to go away
// (GOAWAY NO_ERROR "too many connections", no call run) before it closes,
// so that a call its client sends meanwhile is known not to have run.
func TestEvictedGRPCConnectionHearsGoAway(t *testing.T) {
	s := startServer(t, "-backend", "nop", "-model", "tiny", "-size", "32x32", "-max-conns", "1", "-grpc-server", "h2grpc")
	c := dialT(t, s.grpc)
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	_, err := io.WriteString(c, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(c, c)
	require.NoError(t, fr.WriteSettings())
	f, err := fr.ReadFrame()
	require.NoError(t, err)
	require.IsType(t, &http2.SettingsFrame{}, f, "the server's first frame: it serves the connection")
	time.Sleep(1500 * time.Millisecond) // past the 1 s grace from its opening

	h2Conn(t, s.grpc) // makes room by evicting c
	var away *http2.GoAwayFrame
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			require.ErrorIs(t, err, io.EOF, "the connection ends with a close, not a reset or the deadline")
			break
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			away = g
		}
	}
	require.NotNil(t, away, "a GOAWAY before the close")
	assert.Equal(t, http2.ErrCodeNo, away.ErrCode)
	assert.Equal(t, uint32(0), away.LastStreamID)
	assert.Equal(t, "too many connections", string(away.DebugData()))
}

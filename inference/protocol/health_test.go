package protocol_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// TestHealthHTTPHandlerServesOnlyHealth: the health-only handler answers
// live and ready as HTTPHandler does, and everything else 503 with
// Retry-After and Connection: close, without reading the body.
func TestHealthHTTPHandlerServesOnlyHealth(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	hs := httptest.NewServer(f.svc.HealthHTTPHandler())
	defer hs.Close()
	get := func(method, path string) *http.Response {
		req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(`{"inputs":[]}`))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	assert.Equal(t, http.StatusOK, get(http.MethodGet, "/v2/health/live").StatusCode)
	assert.Equal(t, http.StatusOK, get(http.MethodGet, "/v2/health/ready").StatusCode)
	for _, path := range []string{"/v2/models/resnet18/infer", "/v2", "/v2/models/resnet18/ready", "/metrics"} {
		resp := get(http.MethodPost, path)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, path)
		assert.Equal(t, "1", resp.Header.Get("Retry-After"), path)
		assert.True(t, resp.Close, "%s: Connection: close", path)
	}
	f.svc.Drain()
	assert.Equal(t, http.StatusBadRequest, get(http.MethodGet, "/v2/health/ready").StatusCode, "not ready once draining")
	assert.Equal(t, http.StatusOK, get(http.MethodGet, "/v2/health/live").StatusCode)
}

// TestHealthGRPCServerServesOnlyHealth: the health-only gRPC server
// answers Check, ServerLive and ServerReady, and refuses every other call
// with UNAVAILABLE.
func TestHealthGRPCServerServesOnlyHealth(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	g := f.svc.NewHealthGRPCServer(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go g.Serve(ln)
	defer g.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	h, err := grpc_health_v1.NewHealthClient(cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, grpc_health_v1.HealthCheckResponse_SERVING, h.GetStatus())
	api := v2pb.NewGRPCInferenceServiceClient(cc)
	live, err := api.ServerLive(ctx, &v2pb.ServerLiveRequest{})
	require.NoError(t, err)
	assert.True(t, live.GetLive())
	ready, err := api.ServerReady(ctx, &v2pb.ServerReadyRequest{})
	require.NoError(t, err)
	assert.True(t, ready.GetReady())
	_, err = api.ModelInfer(ctx, &v2pb.ModelInferRequest{ModelName: "resnet18"})
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	_, err = api.ModelMetadata(ctx, &v2pb.ModelMetadataRequest{Name: "resnet18"})
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}

// recordingTracker is a ConnTracker that knows every address and records
// what it hears.
type recordingTracker struct {
	mu       sync.Mutex
	events   []bool
	addrs    map[string]bool
	goodbyes int
}

type addrConn struct {
	net.Conn
	addr net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.addr }

func (r *recordingTracker) SetBusy(c net.Conn, busy bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, busy)
	r.addrs[c.RemoteAddr().String()] = true
}

func (r *recordingTracker) Lookup(addr net.Addr) net.Conn { return addrConn{addr: addr} }

func (r *recordingTracker) SetGoodbye(net.Conn, func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.goodbyes++
}

func (r *recordingTracker) seen() ([]bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.events...), len(r.addrs)
}

// TestGRPCServersReportBusyConnections: both gRPC servers tell
// GRPCLimits.Conns when a connection's calls begin and end, once each way
// per call made alone; h2grpc also gives it each connection's goodbye.
func TestGRPCServersReportBusyConnections(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	for _, impl := range []string{protocol.GRPCServerH2, protocol.GRPCServerGo} {
		t.Run(impl, func(t *testing.T) {
			rec := &recordingTracker{addrs: map[string]bool{}}
			g, err := f.svc.NewGRPCServer(impl, protocol.GRPCLimits{Conns: rec})
			require.NoError(t, err)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			go g.Serve(ln)
			defer g.Stop()
			gc, err := client.NewGRPC(ln.Addr().String(), client.GRPCOptions{Transport: client.TransportGRPCGo})
			require.NoError(t, err)
			defer gc.Close()
			for range 2 {
				live, err := gc.Live(context.Background())
				require.NoError(t, err)
				require.True(t, live)
			}
			require.Eventually(t, func() bool { e, _ := rec.seen(); return len(e) == 4 }, 10*time.Second, time.Millisecond)
			events, conns := rec.seen()
			assert.Equal(t, []bool{true, false, true, false}, events)
			assert.Equal(t, 1, conns, "one connection")
			rec.mu.Lock()
			defer rec.mu.Unlock()
			// grpc-go offers no way to end one connection politely.
			assert.Equal(t, map[string]int{protocol.GRPCServerH2: 1, protocol.GRPCServerGo: 0}[impl], rec.goodbyes, "goodbyes given")
		})
	}
}

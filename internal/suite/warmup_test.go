package suite

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// peerSet records the client addresses (one per connection) requests came
// from.
type peerSet struct {
	mu    sync.Mutex
	addrs map[string]int
}

func (p *peerSet) add(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addrs[addr]++
}

func (p *peerSet) count() (conns, requests int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.addrs {
		requests += n
	}
	return len(p.addrs), requests
}

// peerServer answers ModelInfer with an empty response, noting the peer.
type peerServer struct {
	v2pb.UnimplementedGRPCInferenceServiceServer
	peers *peerSet
}

func (s peerServer) ModelInfer(ctx context.Context, r *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	if p, ok := peer.FromContext(ctx); ok {
		s.peers.add(p.Addr.String())
	}
	return &v2pb.ModelInferResponse{ModelName: r.GetModelName()}, nil
}

// The warm-up sends one request on each of a gRPC client's connections,
// however fast the server answers; and over HTTP as many requests at once
// as the closed load keeps outstanding on the server, so the client opens a
// connection for each.
func TestWarmUpReachesEveryConnection(t *testing.T) {
	req := &client.InferRequest{Model: "m", Inputs: []client.Tensor{client.FP32("input", []int64{1, 1}, []float32{1})}}

	// Over gRPC, one request on each connection, and as many as the load
	// keeps outstanding, round the connections.
	for _, tc := range []struct{ outstanding, want int }{{1, 3}, {7, 7}} {
		t.Run(fmt.Sprintf("grpc/outstanding=%d", tc.outstanding), func(t *testing.T) {
			peers := &peerSet{addrs: map[string]int{}}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			gs := grpc.NewServer()
			v2pb.RegisterGRPCInferenceServiceServer(gs, peerServer{peers: peers})
			go gs.Serve(ln)
			t.Cleanup(gs.Stop)
			gc, err := client.NewGRPC(ln.Addr().String(), client.GRPCOptions{Conns: 3})
			require.NoError(t, err)
			t.Cleanup(func() { gc.Close() })
			f := &fleet{spec: wireSpec{transport: "grpc", servers: 1, outstanding: tc.outstanding}, clients: []wireClient{gc}, answered: make([]atomic.Uint64, 1), plain: req}
			require.NoError(t, f.warmUp(context.Background()))
			conns, requests := peers.count()
			assert.Equal(t, 3, conns, "connections warmed")
			assert.Equal(t, tc.want, requests)
			assert.Equal(t, uint64(tc.want), f.answered[0].Load())
		})
	}

	t.Run("http", func(t *testing.T) {
		const outstanding = 3
		peers := &peerSet{addrs: map[string]int{}}
		var arrived atomic.Int32
		all := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			peers.add(r.RemoteAddr)
			if arrived.Add(1) == outstanding {
				close(all)
			}
			select { // answer once all are in: they were sent at once
			case <-all:
			case <-time.After(10 * time.Second):
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"model_name":"m","outputs":[]}`)
		}))
		t.Cleanup(srv.Close)
		hc, err := client.NewHTTP(srv.URL, client.HTTPOptions{})
		require.NoError(t, err)
		f := &fleet{spec: wireSpec{transport: "http", servers: 1, outstanding: outstanding}, clients: []wireClient{hc}, answered: make([]atomic.Uint64, 1), plain: req}
		require.NoError(t, f.warmUp(context.Background()))
		conns, requests := peers.count()
		assert.Equal(t, outstanding, conns, "connections warmed")
		assert.Equal(t, outstanding, requests)
	})
}

// outstandingPerServer: the load's outstanding requests per server (rounded
// up), at most the bound, and 0 when nothing bounds them.
func TestOutstandingPerServer(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		outstanding, servers int
		want                 int
	}{
		{"closed, one server", 4, 1, 4},
		{"closed, spread over servers", 5, 2, 3},
		{"burst or open", 0, 1, 0},
		{"many", 1000, 1, maxWarmUp},
	} {
		f := &fleet{spec: wireSpec{transport: "http", outstanding: tc.outstanding, servers: tc.servers}}
		assert.Equal(t, tc.want, f.outstandingPerServer(maxWarmUp), tc.name)
	}
}

// A shared-memory fleet has an output slot for each warm-up request, all in
// flight at once, even when the load keeps fewer outstanding: no warm-up
// request shares a slot.
func TestSHMSlotsCoverTheWarmUp(t *testing.T) {
	gc, err := client.NewGRPC("127.0.0.1:1", client.GRPCOptions{Conns: 4}) // connects on its first call: never here
	require.NoError(t, err)
	t.Cleanup(func() { gc.Close() })
	hc, err := client.NewHTTP("http://127.0.0.1:1", client.HTTPOptions{})
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		f        fleet
		outBytes int64
		want     int
	}{
		{"grpc, one outstanding, 4 connections", fleet{spec: wireSpec{transport: "grpc", servers: 1, outstanding: 1}, clients: []wireClient{gc}}, 4000, 4},
		{"grpc, 8 outstanding, 4 connections", fleet{spec: wireSpec{transport: "grpc", servers: 1, outstanding: 8}, clients: []wireClient{gc}}, 4000, 8},
		{"grpc, two servers", fleet{spec: wireSpec{transport: "grpc", servers: 2, outstanding: 2}, clients: []wireClient{gc, gc}}, 4000, 8},
		{"http, closed", fleet{spec: wireSpec{transport: "http", servers: 1, outstanding: 3}, clients: []wireClient{hc}}, 4000, 3},
		{"http, burst", fleet{spec: wireSpec{transport: "http", servers: 1}, clients: []wireClient{hc}}, shmOutputBudget / 2, 2},
	} {
		assert.Equal(t, tc.want, tc.f.shmSlots(tc.outBytes), tc.name)
	}
}

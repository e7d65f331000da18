package client_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// peerRecorder answers ModelInfer with an empty response once the request's
// id is released (ids not held answer at once), noting the connection (the
// client's address) each id came on.
type peerRecorder struct {
	v2pb.UnimplementedGRPCInferenceServiceServer
	mu    sync.Mutex
	peers map[string]string
	held  map[string]chan struct{}
	in    chan string // ids, as they arrive
}

func (p *peerRecorder) ModelInfer(ctx context.Context, r *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	pr, _ := peer.FromContext(ctx)
	p.mu.Lock()
	p.peers[r.GetId()] = pr.Addr.String()
	hold := p.held[r.GetId()]
	p.mu.Unlock()
	p.in <- r.GetId()
	if hold != nil {
		<-hold
	}
	return &v2pb.ModelInferResponse{ModelName: r.GetModelName(), Id: r.GetId()}, nil
}

// serveRecorder serves rec on a loopback port and returns a client of it
// with conns connections; both stop at the test's end.
func serveRecorder(t *testing.T, rec *peerRecorder, conns int) *client.GRPCClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	v2pb.RegisterGRPCInferenceServiceServer(gs, rec)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	c, err := client.NewGRPC(ln.Addr().String(), client.GRPCOptions{Conns: conns})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// Infer takes the connection with the fewest calls in flight, not the next
// in turn: a call that ends early frees its connection for the next one,
// while the connection next in turn is still busy.
func TestGRPCInferTakesTheLeastBusyConnection(t *testing.T) {
	rec := &peerRecorder{peers: map[string]string{}, in: make(chan string, 8),
		held: map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}}
	c := serveRecorder(t, rec, 2)

	call := func(id string) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := c.Infer(context.Background(), &client.InferRequest{Model: "m", ID: id,
				Inputs: []client.Tensor{client.FP32("input", []int64{1, 1}, []float32{1})}})
			done <- err
		}()
		return done
	}
	a := call("a")
	require.Equal(t, "a", <-rec.in)
	b := call("b")
	require.Equal(t, "b", <-rec.in)
	close(rec.held["b"])
	require.NoError(t, <-b)
	// In turn, c would go to a's connection, still busy.
	require.NoError(t, <-call("c"))
	<-rec.in
	close(rec.held["a"])
	require.NoError(t, <-a)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.NotEqual(t, rec.peers["a"], rec.peers["b"], "a and b, both in flight, on one connection")
	assert.Equal(t, rec.peers["b"], rec.peers["c"], "c not on the idle connection")
}

// InferOn sends on the connection asked for, even when every connection is
// idle (where Infer would take the first), and refuses one out of range.
func TestGRPCInferOnTakesTheConnectionAsked(t *testing.T) {
	rec := &peerRecorder{peers: map[string]string{}, in: make(chan string, 8), held: map[string]chan struct{}{}}
	c := serveRecorder(t, rec, 3)
	require.Equal(t, 3, c.Conns())

	req := func(id string) *client.InferRequest {
		return &client.InferRequest{Model: "m", ID: id, Inputs: []client.Tensor{client.FP32("input", []int64{1, 1}, []float32{1})}}
	}
	ids := []string{"on0", "on1", "on2", "again0"}
	for i, id := range ids {
		resp, err := c.InferOn(context.Background(), i%3, req(id))
		require.NoError(t, err)
		assert.Equal(t, id, resp.ID)
		<-rec.in
	}
	for _, conn := range []int{-1, 3} {
		_, err := c.InferOn(context.Background(), conn, req("out"))
		assert.ErrorContains(t, err, "of 3", "InferOn(%d)", conn)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.NotEqual(t, rec.peers["on0"], rec.peers["on1"])
	assert.NotEqual(t, rec.peers["on1"], rec.peers["on2"])
	assert.NotEqual(t, rec.peers["on0"], rec.peers["on2"])
	assert.Equal(t, rec.peers["on0"], rec.peers["again0"])
}

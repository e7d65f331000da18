package client_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// streamPeer is a ModelStreamInfer server whose behaviour each request's
// model name picks: "echo" answers at once with the request's id; "pair"
// waits for a second "pair" and answers the two last first; "noid-error"
// answers an error that names no request; "hang" is never answered; "die"
// ends the call with an error status. It records every request.
type streamPeer struct {
	v2pb.UnimplementedGRPCInferenceServiceServer
	mu     sync.Mutex
	seen   []*v2pb.ModelInferRequest
	opened int // calls
	addr   string
}

func (p *streamPeer) ModelStreamInfer(st grpc.BidiStreamingServer[v2pb.ModelInferRequest, v2pb.ModelStreamInferResponse]) error {
	p.mu.Lock()
	p.opened++
	p.mu.Unlock()
	answer := func(r *v2pb.ModelInferRequest) error {
		return st.Send(&v2pb.ModelStreamInferResponse{InferResponse: &v2pb.ModelInferResponse{Id: r.GetId(), ModelName: r.GetModelName()}})
	}
	var pending *v2pb.ModelInferRequest
	for {
		r, err := st.Recv()
		if err != nil {
			return nil
		}
		p.mu.Lock()
		p.seen = append(p.seen, r)
		p.mu.Unlock()
		switch r.GetModelName() {
		case "pair":
			if pending == nil {
				pending = r
				continue
			}
			err = answer(r)
			if err == nil {
				err = answer(pending)
			}
			pending = nil
		case "noid-error":
			err = st.Send(&v2pb.ModelStreamInferResponse{ErrorMessage: "no room"})
		case "hang":
		case "die":
			return status.Error(codes.Internal, "boom")
		default:
			err = answer(r)
		}
		if err != nil {
			return err
		}
	}
}

func (p *streamPeer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seen)
}

func (p *streamPeer) last() *v2pb.ModelInferRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[len(p.seen)-1]
}

func streamClient(t *testing.T) (*client.GRPCClient, *streamPeer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &streamPeer{addr: ln.Addr().String()}
	g := grpc.NewServer()
	v2pb.RegisterGRPCInferenceServiceServer(g, p)
	go g.Serve(ln)
	c, err := client.NewGRPC(ln.Addr().String(), client.GRPCOptions{Stream: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Close()
		g.Stop()
	})
	return c, p
}

func TestGRPCStreamMatchesAnswersSentOutOfOrder(t *testing.T) {
	c, p := streamClient(t)
	var wg sync.WaitGroup
	got := make([]*client.InferResponse, 2)
	for i, id := range []string{"first", "second"} {
		wg.Go(func() {
			resp, err := c.Infer(context.Background(), &client.InferRequest{Model: "pair", ID: id})
			assert.NoError(t, err)
			got[i] = resp
		})
		// "first" reaches the peer first, and is answered last.
		require.Eventually(t, func() bool { return p.count() == i+1 }, 5*time.Second, time.Millisecond)
	}
	wg.Wait()
	require.NotNil(t, got[0])
	require.NotNil(t, got[1])
	assert.Equal(t, "first", got[0].ID)
	assert.Equal(t, "second", got[1].ID)
}

// A request without an id gets one made up (and its answer's ID is empty,
// as over ModelInfer); a context's deadline goes as the timeout parameter.
func TestGRPCStreamMakesUpIDsAndSendsDeadlines(t *testing.T) {
	c, p := streamClient(t)
	resp, err := c.Infer(context.Background(), &client.InferRequest{Model: "echo"})
	require.NoError(t, err)
	assert.Empty(t, resp.ID)
	assert.True(t, strings.HasPrefix(p.last().GetId(), "inferbench-stream-"), p.last().GetId())
	assert.NotContains(t, p.last().GetParameters(), "timeout")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Infer(ctx, &client.InferRequest{Model: "echo", ID: "mine"})
	require.NoError(t, err)
	assert.Equal(t, "mine", p.last().GetId())
	us := p.last().GetParameters()["timeout"].GetInt64Param()
	assert.True(t, us > 4_000_000 && us <= 5_000_000, "timeout %d us", us)

	// A timeout the caller set is kept.
	_, err = c.Infer(ctx, &client.InferRequest{Model: "echo", TimeoutMicros: 1234})
	require.NoError(t, err)
	assert.Equal(t, int64(1234), p.last().GetParameters()["timeout"].GetInt64Param())
}

func TestGRPCStreamErrors(t *testing.T) {
	c, p := streamClient(t)
	ctx := context.Background()

	// An error answer that names no request goes to the only one waiting.
	_, err := c.Infer(ctx, &client.InferRequest{Model: "noid-error"})
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, codes.Unknown, ce.Code)
	assert.Equal(t, "no room", ce.Msg)

	// A caller that gives up gets its context's error; the stream goes on.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.Infer(short, &client.InferRequest{Model: "hang", ID: "h"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = c.Infer(ctx, &client.InferRequest{Model: "echo"})
	require.NoError(t, err)

	// Two calls may not share an id while both are in flight.
	hung := make(chan error, 1)
	go func() {
		_, err := c.Infer(ctx, &client.InferRequest{Model: "hang", ID: "twice"})
		hung <- err
	}()
	require.Eventually(t, func() bool { return p.last().GetId() == "twice" }, 5*time.Second, time.Millisecond)
	_, err = c.Infer(ctx, &client.InferRequest{Model: "echo", ID: "twice"})
	require.ErrorContains(t, err, `request id "twice" is already in flight`)

	// The call ending fails what waits on it, and the next request opens a
	// new call.
	_, err = c.Infer(ctx, &client.InferRequest{Model: "die"})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, codes.Internal, ce.Code)
	assert.Equal(t, "boom", ce.Msg)
	select {
	case err := <-hung:
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, codes.Internal, ce.Code)
	case <-time.After(5 * time.Second):
		t.Fatal("a request waiting on the failed call was not answered")
	}
	// A request over the message limit is refused before it is sent, and
	// the call goes on.
	big, err := client.NewGRPC(p.addr, client.GRPCOptions{Stream: true, MaxMessageBytes: 1000})
	require.NoError(t, err)
	defer big.Close()
	_, err = big.Infer(ctx, &client.InferRequest{Model: "echo", Inputs: []client.Tensor{client.FP32("input", []int64{1, 300}, make([]float32, 300))}})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, codes.ResourceExhausted, ce.Code)

	resp, err := c.Infer(ctx, &client.InferRequest{Model: "echo", ID: "after"})
	require.NoError(t, err)
	assert.Equal(t, "after", resp.ID)
	p.mu.Lock()
	assert.Equal(t, 2, p.opened)
	p.mu.Unlock()
}

// Close ends the stream: a request waiting on it fails, Close returns once the
// stream's goroutine has, and a later request fails at once.
func TestGRPCStreamCloseEndsTheStream(t *testing.T) {
	c, p := streamClient(t)
	waiting := make(chan error, 1)
	go func() {
		_, err := c.Infer(context.Background(), &client.InferRequest{Model: "hang"})
		waiting <- err
	}()
	require.Eventually(t, func() bool { return p.count() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, c.Close())
	select {
	case err := <-waiting:
		assert.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting request was not answered by Close")
	}
	_, err := c.Infer(context.Background(), &client.InferRequest{Model: "echo"})
	assert.Error(t, err)
}

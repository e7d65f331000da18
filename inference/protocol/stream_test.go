package protocol_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// streamRequest is a ModelInferRequest of images as raw FP32 contents.
func streamRequest(id, model string, images []float32) *v2pb.ModelInferRequest {
	shape := []int64{int64(len(images) / (3 * side * side)), 3, side, side}
	return &v2pb.ModelInferRequest{Id: id, ModelName: model,
		Inputs:           []*v2pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: shape}},
		RawInputContents: [][]byte{client.FP32("input", shape, images).Data}}
}

func rawLogits(t *testing.T, r *v2pb.ModelInferResponse) []float32 {
	t.Helper()
	require.Len(t, r.GetRawOutputContents(), 1)
	v, err := client.Tensor{Datatype: "FP32", Data: r.GetRawOutputContents()[0]}.Float32s()
	require.NoError(t, err)
	return v
}

// Requests sent on one ModelStreamInfer call while the back-end is held are
// all served at once and each answered with its own id and the in-process
// logits; a request for an unknown model is answered with an error that
// names it, and the call goes on; closing the client's side ends the call
// after the last answer.
func TestStreamAnswersEveryRequestByID(t *testing.T) {
	f := newFixture(t, fixtureOpts{gated: true})
	ref := newFixture(t, fixtureOpts{}) // the same model and back-end, ungated
	st, err := f.grpcClient(t).API().ModelStreamInfer(context.Background())
	require.NoError(t, err)
	const n = 6
	want := map[string][]float32{}
	for i := range n {
		images := randomImages(uint64(10+i), 1+i%2)
		id := fmt.Sprintf("req-%d", i)
		want[id] = ref.inProcess(t, images)
		require.NoError(t, st.Send(streamRequest(id, "resnet18", images)))
	}
	require.NoError(t, st.Send(streamRequest("bad", "resnet50", randomImages(1, 1))))
	require.NoError(t, st.CloseSend())
	// The bad request needs no back-end: its answer comes while the others
	// wait at the gate, and every good one was admitted before the gate opens.
	a, err := st.Recv()
	require.NoError(t, err)
	assert.Contains(t, a.GetErrorMessage(), `unknown model "resnet50"`)
	assert.Equal(t, "bad", a.GetInferResponse().GetId())
	assert.Eventually(t, func() bool { return f.srv.Stats().Accepted >= n }, 10*time.Second, time.Millisecond)
	f.gate.release()
	for range n {
		a, err := st.Recv()
		require.NoError(t, err)
		require.Empty(t, a.GetErrorMessage())
		id := a.GetInferResponse().GetId()
		require.Contains(t, want, id)
		assert.Equal(t, bits(want[id]), bits(rawLogits(t, a.GetInferResponse())), id)
		delete(want, id)
	}
	_, err = st.Recv()
	assert.Equal(t, io.EOF, err, "the call ends after the last answer")
}

// A client that sends more than protocol.StreamInflight requests without the
// back-end answering has only StreamInflight of them admitted: the rest wait
// in the stream, unread, and are served once room is made.
func TestStreamAdmitsAtMostStreamInflight(t *testing.T) {
	f := newFixture(t, fixtureOpts{gated: true})
	st, err := f.grpcClient(t).API().ModelStreamInfer(context.Background())
	require.NoError(t, err)
	const extra = 5
	images := randomImages(3, 1)
	for i := range protocol.StreamInflight + extra {
		require.NoError(t, st.Send(streamRequest(fmt.Sprint(i), "resnet18", images)))
	}
	require.NoError(t, st.CloseSend())
	require.Eventually(t, func() bool { return f.srv.Stats().Accepted >= protocol.StreamInflight }, 10*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // time to admit more, were it allowed
	assert.Equal(t, uint64(protocol.StreamInflight), f.srv.Stats().Accepted)
	f.gate.release()
	seen := map[string]bool{}
	for range protocol.StreamInflight + extra {
		a, err := st.Recv()
		require.NoError(t, err)
		require.Empty(t, a.GetErrorMessage())
		seen[a.GetInferResponse().GetId()] = true
	}
	assert.Len(t, seen, protocol.StreamInflight+extra)
}

// When the server drains, a stream answers what it took and then ends with
// Unavailable, whether it holds a request or sits idle: an open stream does
// not hold the drain up.
func TestStreamEndsWhenTheServerDrains(t *testing.T) {
	f := newFixture(t, fixtureOpts{gated: true})
	api := f.grpcClient(t).API()
	busy, err := api.ModelStreamInfer(context.Background())
	require.NoError(t, err)
	idle, err := api.ModelStreamInfer(context.Background())
	require.NoError(t, err)
	require.NoError(t, busy.Send(streamRequest("held", "resnet18", randomImages(4, 1))))
	require.Eventually(t, func() bool { return f.gate.waiting.Load() == 1 }, 10*time.Second, time.Millisecond)

	f.svc.Drain()
	_, err = idle.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "the idle stream: %v", err)
	assert.ErrorContains(t, err, "draining")

	f.gate.release()
	a, err := busy.Recv()
	require.NoError(t, err)
	assert.Equal(t, "held", a.GetInferResponse().GetId())
	assert.Empty(t, a.GetErrorMessage())
	_, err = busy.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "the busy stream, after its answer: %v", err)
}

// A stream's requests being served hold at most twice the largest message
// the server takes: with the body limit just above one 8-image request, a
// client that sends four of them has two admitted while the back-end is
// held, and the other two once those are answered.
func TestStreamHoldsAtMostTwoLargestRequests(t *testing.T) {
	const n = 8
	limit := int64(n*3*side*side*4 + 4096)
	f := newFixture(t, fixtureOpts{gated: true, opts: protocol.Options{MaxBodyBytes: limit}})
	st, err := f.grpcClient(t).API().ModelStreamInfer(context.Background())
	require.NoError(t, err)
	images := randomImages(6, n)
	for i := range 4 {
		require.NoError(t, st.Send(streamRequest(fmt.Sprint(i), "resnet18", images)))
	}
	require.Eventually(t, func() bool { return f.srv.Stats().Accepted >= 2 }, 10*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // time to admit more, were it allowed
	assert.Equal(t, uint64(2), f.srv.Stats().Accepted)
	f.gate.release()
	for range 4 {
		a, err := st.Recv()
		require.NoError(t, err)
		require.Empty(t, a.GetErrorMessage())
	}
}

package protocol

import (
	"context"
	"errors"
	"io"
	"sync"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// StreamInflight bounds the requests of one ModelStreamInfer call that are
// being served at once: past it, the stream's next request is not read until
// one of them is answered, so a client that sends faster than it reads
// answers is held back by HTTP/2 flow control. The requests being served
// also hold at most twice the Service's MaxBodyBytes of messages: a call
// holds no more than two largest requests being served and two read but not
// yet admitted, where ModelInfer holds one a call. One weighted semaphore keeps both bounds: a
// request weighs its message's size, at least 1/StreamInflight of the
// budget and at most half of it.
const StreamInflight = 64

// ModelStreamInfer is Triton's streaming inference: the call carries any
// number of ModelInferRequests, each served as ModelInfer would serve it, and
// answers each with a ModelStreamInferResponse once it is done: the
// response, or an error_message with an infer_response that holds only the
// request's id, model name and version (so that a client can tell which
// request failed; Triton's own clients read only the message). Answers come
// in the order requests finish, which for requests served at once need not
// be the order they were sent: match them by id. The call's deadline, if any,
// bounds every request on it; a request's own timeout parameter still
// applies. When the client closes its side, the call ends after the last
// answer; when the call ends early, requests still in flight are cancelled.
// When the server drains, the call takes no more requests and ends, once the
// ones it took are answered, with Unavailable, so that an open stream does
// not hold the drain up.
func (g grpcService) ModelStreamInfer(stream grpc.BidiStreamingServer[v2pb.ModelInferRequest, v2pb.ModelStreamInferResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	var (
		sendMu  sync.Mutex
		sendErr error
		wg      sync.WaitGroup
	)
	send := func(a *v2pb.ModelStreamInferResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if sendErr == nil {
			if sendErr = stream.Send(a); sendErr != nil {
				cancel() // the peer is gone: stop what is still running
			}
		}
	}
	// Recv runs in a goroutine of its own, so that a drain ends the call
	// while it waits. It is the one goroutine here that the handler does not
	// wait for: it returns when the call ends, and gRPC ends the call when the
	// handler returns (cancelling the stream's context interrupts Recv).
	reqs, recvErr := make(chan *v2pb.ModelInferRequest), make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	unit := (2*g.s.opts.MaxBodyBytes + StreamInflight - 1) / StreamInflight
	budget := unit * StreamInflight
	held := semaphore.NewWeighted(budget)
	var end error
serve:
	for {
		select {
		case r := <-reqs:
			weight := max(unit, min(int64(proto.Size(r)), budget/2))
			if err := held.Acquire(ctx, weight); err != nil {
				end = err
				break serve
			}
			wg.Go(func() {
				defer held.Release(weight)
				send(g.s.streamAnswer(ctx, r))
			})
		case err := <-recvErr:
			if !errors.Is(err, io.EOF) {
				end = err
			}
			break serve
		case <-ctx.Done():
			end = ctx.Err()
			break serve
		case <-g.s.drained:
			break serve
		}
	}
	wg.Wait()
	sendMu.Lock()
	defer sendMu.Unlock()
	switch {
	case sendErr != nil:
		return sendErr
	case end != nil:
		return end
	case g.s.Draining():
		return status.Error(codes.Unavailable, "inferbench: the server is draining: this stream takes no more requests")
	}
	return nil
}

// streamAnswer serves one request of a stream.
func (s *Service) streamAnswer(ctx context.Context, r *v2pb.ModelInferRequest) *v2pb.ModelStreamInferResponse {
	resp, err := s.grpcInfer(ctx, r)
	if err == nil {
		return &v2pb.ModelStreamInferResponse{InferResponse: resp}
	}
	e := asError(err)
	s.errs.addGRPC(e.Code)
	return &v2pb.ModelStreamInferResponse{ErrorMessage: e.Msg,
		InferResponse: &v2pb.ModelInferResponse{Id: r.GetId(), ModelName: r.GetModelName(), ModelVersion: r.GetModelVersion()}}
}

package protocol

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"

	"github.com/inferbench/inferbench/inference/protocol/v2pb"
)

// StreamInflight bounds the requests of one ModelStreamInfer call that are
// being served at once: past it, the stream's next request is not read until
// one of them is answered, so a client that sends faster than it reads
// answers is held back by HTTP/2 flow control.
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
func (g grpcService) ModelStreamInfer(stream grpc.BidiStreamingServer[v2pb.ModelInferRequest, v2pb.ModelStreamInferResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	var (
		sendMu  sync.Mutex
		sendErr error
		wg      sync.WaitGroup
	)
	slots := make(chan struct{}, StreamInflight)
	send := func(a *v2pb.ModelStreamInferResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if sendErr == nil {
			if sendErr = stream.Send(a); sendErr != nil {
				cancel() // the peer is gone: stop what is still running
			}
		}
	}
	var recvErr error
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			recvErr = ctx.Err()
			break
		}
		r, err := stream.Recv()
		if err != nil {
			<-slots
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			send(g.s.streamAnswer(ctx, r))
		})
	}
	wg.Wait()
	sendMu.Lock()
	defer sendMu.Unlock()
	if sendErr != nil {
		return sendErr
	}
	return recvErr
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

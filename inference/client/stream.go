package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// inferStream carries the Infer calls of one connection as messages of one
// ModelStreamInfer call (GRPCOptions.Stream), matching each answer to its
// call by the request's id. The call is opened on first use and again after
// it fails.
type inferStream struct {
	api      v2pb.GRPCInferenceServiceClient
	maxBytes int            // GRPCOptions.MaxMessageBytes
	receive  sync.WaitGroup // the calls' receive goroutines: GRPCClient.Close waits for them
	next     atomic.Uint64  // for the ids the client makes up

	mu     sync.Mutex
	cur    *streamCall // nil until first use and after a failure
	closed bool        // by close: no call opens any more
}

// streamCall is one ModelStreamInfer call and the requests waiting on it.
type streamCall struct {
	st     grpc.BidiStreamingClient[v2pb.ModelInferRequest, v2pb.ModelStreamInferResponse]
	cancel context.CancelFunc
	sendMu sync.Mutex // Send is not safe for concurrent use

	mu      sync.Mutex
	waiting map[string]chan streamAnswer
	err     error // why the call ended; nil while it runs
}

type streamAnswer struct {
	resp *v2pb.ModelStreamInferResponse
	err  error
}

// madeUpID prefixes the ids the client gives requests that have none.
const madeUpID = "inferbench-stream-"

// call returns the running ModelStreamInfer call, opening one if needed.
func (s *inferStream) call() (*streamCall, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur; c != nil && c.failed() == nil {
		return c, nil
	}
	if s.closed {
		return nil, errors.New("client: closed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := s.api.ModelStreamInfer(ctx)
	if err != nil {
		cancel()
		return nil, grpcErr(err)
	}
	c := &streamCall{st: st, cancel: cancel, waiting: map[string]chan streamAnswer{}}
	s.cur = c
	s.receive.Go(c.receive)
	return c, nil
}

// close ends the running call, if any, and waits for every call's receive
// goroutine to return.
func (s *inferStream) close() {
	s.mu.Lock()
	s.closed = true
	if c := s.cur; c != nil {
		c.fail(errors.New("client: closed"))
	}
	s.mu.Unlock()
	s.receive.Wait()
}

func (c *streamCall) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail ends the call: every waiting request gets err, and the next Infer
// opens a new call.
func (c *streamCall) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		for id, ch := range c.waiting {
			ch <- streamAnswer{err: err}
			delete(c.waiting, id)
		}
	}
	c.mu.Unlock()
	c.cancel()
}

// receive hands each answer to the request with its id until the call ends.
// An answer for no waiting request (one whose caller gave up) is dropped; an
// error answer that names no waiting request goes to the only one waiting,
// and with several waiting it ends the call, since it cannot be told whose
// it is.
func (c *streamCall) receive() {
	for {
		a, err := c.st.Recv()
		if err != nil {
			c.fail(grpcErr(err))
			return
		}
		id := a.GetInferResponse().GetId()
		c.mu.Lock()
		ch, ok := c.waiting[id]
		if !ok && a.GetErrorMessage() != "" && len(c.waiting) == 1 {
			for k, v := range c.waiting {
				id, ch = k, v
			}
			ok = true
		}
		if ok {
			delete(c.waiting, id)
			ch <- streamAnswer{resp: a}
		}
		unmatched := !ok && a.GetErrorMessage() != "" && len(c.waiting) > 0
		c.mu.Unlock()
		if unmatched {
			c.fail(fmt.Errorf("client: the server answered %q for a request of the stream without saying which", a.GetErrorMessage()))
			return
		}
	}
}

// infer sends r on the stream and waits for its answer or the end of ctx. A
// request without an id gets one made up for the stream (and the answer's
// ID is then empty, as ModelInfer's would be); a caller's id must not be in
// flight on the stream already. A deadline of ctx becomes the request's
// timeout parameter unless it has one, since a message of a stream carries
// no deadline of its own.
func (s *inferStream) infer(ctx context.Context, r *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	// A message over the limit would end the call, and with it every other
	// request on it: refuse it here, as ModelInfer's limit refuses one call.
	size := 0
	for _, b := range r.RawInputContents {
		size += len(b)
	}
	if size > s.maxBytes {
		return nil, &Error{Code: codes.ResourceExhausted, Msg: fmt.Sprintf("client: a request of %d bytes of raw input exceeds the message limit of %d bytes", size, s.maxBytes)}
	}
	c, err := s.call()
	if err != nil {
		return nil, err
	}
	ownID := r.Id != ""
	if !ownID {
		r.Id = madeUpID + strconv.FormatUint(s.next.Add(1), 10)
	}
	if d, ok := ctx.Deadline(); ok {
		if _, set := r.Parameters["timeout"]; !set {
			us := max(1, time.Until(d).Microseconds())
			if r.Parameters == nil {
				r.Parameters = map[string]*v2pb.InferParameter{}
			}
			r.Parameters["timeout"] = &v2pb.InferParameter{ParameterChoice: &v2pb.InferParameter_Int64Param{Int64Param: us}}
		}
	}
	ch := make(chan streamAnswer, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	if _, dup := c.waiting[r.Id]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("client: request id %q is already in flight on this stream", r.Id)
	}
	c.waiting[r.Id] = ch
	c.mu.Unlock()

	c.sendMu.Lock()
	err = c.st.Send(r)
	c.sendMu.Unlock()
	if err != nil {
		// io.EOF means the call ended, and receive fails it with the cause;
		// any other error is this request's, and gRPC ended the call for it.
		if !errors.Is(err, io.EOF) {
			c.fail(grpcErr(err))
		}
		a := <-ch
		return nil, a.err
	}
	select {
	case a := <-ch:
		if a.err != nil {
			return nil, a.err
		}
		if msg := a.resp.GetErrorMessage(); msg != "" {
			return nil, &Error{Code: codes.Unknown, Msg: msg}
		}
		resp := a.resp.GetInferResponse()
		if resp == nil {
			return nil, errors.New("client: the server answered a request of the stream with neither a response nor an error")
		}
		if !ownID {
			resp.Id = ""
		}
		return resp, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.waiting, r.Id)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

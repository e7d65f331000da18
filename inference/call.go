package inference

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/inferbench/inferbench/inference/metrics"
)

// Request is one inference request.
type Request struct {
	// Input is the batch, [n, 3, H, W] float32, NCHW. The server reads it until
	// the request is answered; the caller must not change it before then.
	Input Tensor
	// Sent is the intended send time, from which latency is measured (the
	// scheduled time under open-loop load). Zero means the time Submit is called.
	Sent time.Time
	// Timeout, if positive, bounds the request from Sent; it overrides
	// Config.Timeout. An expired request fails with context.DeadlineExceeded.
	Timeout time.Duration
	// Logits, if its length is n*Classes, receives the logits instead of a new
	// slice.
	Logits []float32
}

// Response is the answer to one request.
type Response struct {
	// Logits is [n, classes], owned by the caller.
	Logits Tensor
	Timing Timing
}

// Timing tells where a request's time went.
type Timing struct {
	ID       uint64    // request number, from 1, in order of Submit
	Sent     time.Time // intended send time
	Admitted time.Time // when Submit queued it
	Started  time.Time // when a worker took its batch
	Done     time.Time // when its logits were ready on the host
	// Queue is Started - Admitted. CopyIn, Compute and CopyOut are the stages of
	// its batch: device-measured when Device is true, wall-clock otherwise.
	Queue, CopyIn, Compute, CopyOut time.Duration
	Device                          bool
	Worker                          int // index of the worker that ran it
	Batch                           int // images in the batch it ran in
}

// Latency is Done - Sent.
func (t *Timing) Latency() time.Duration { return t.Done.Sub(t.Sent) }

// Call is a request in flight. Its result is ready when Done is closed.
type Call struct {
	srv      *Server
	ctx      context.Context
	cancel   context.CancelFunc
	in       Tensor
	n        int
	out      []float32
	done     chan struct{}
	answered atomic.Bool
	resp     Response
	err      error
}

// Done is closed when the call has been answered.
func (c *Call) Done() <-chan struct{} { return c.done }

// Result waits for the answer and returns it.
func (c *Call) Result() (*Response, error) {
	<-c.done
	if c.err != nil {
		return nil, c.err
	}
	return &c.resp, nil
}

// Err waits for the answer and returns its error.
func (c *Call) Err() error {
	<-c.done
	return c.err
}

// Submit validates req and queues it, and returns at once with a Call that
// will be answered exactly once. If the queue is full it waits (Block) or fails
// with ErrQueueFull (Reject). An error means the request was not accepted and
// will not be answered: an *InputError, ErrQueueFull, ErrServerClosed,
// ErrNoWorker, or ctx's error. Cancelling ctx later abandons the request: it is
// dropped before its batch runs, or its result is discarded.
func (s *Server) Submit(ctx context.Context, req Request) (*Call, error) {
	if err := s.validate(&req.Input); err != nil {
		s.counts.rejected.Add(1)
		return nil, err
	}
	n := req.Input.Shape[0]
	if req.Logits != nil && len(req.Logits) != n*s.classes {
		s.counts.rejected.Add(1)
		return nil, &InputError{Field: "logits buffer", Want: fmt.Sprintf("%d values", n*s.classes), Got: fmt.Sprintf("%d", len(req.Logits))}
	}
	if err := ctx.Err(); err != nil {
		s.counts.rejected.Add(1)
		return nil, err
	}
	now := time.Now()
	c := &Call{srv: s, ctx: ctx, in: req.Input, n: n, out: req.Logits, done: make(chan struct{})}
	c.resp.Timing.Sent, c.resp.Timing.Admitted = req.Sent, now
	c.resp.Timing.ID = s.ids.Add(1)
	if req.Sent.IsZero() {
		c.resp.Timing.Sent = now
	}
	timeout := s.cfg.Timeout
	if req.Timeout > 0 {
		timeout = req.Timeout
	}
	if timeout > 0 {
		c.ctx, c.cancel = context.WithDeadline(ctx, c.resp.Timing.Sent.Add(timeout))
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.counts.rejected.Add(1)
		c.release()
		return nil, ErrServerClosed
	}
	if s.live.Load() == 0 {
		s.mu.Unlock()
		s.counts.rejected.Add(1)
		c.release()
		_, cause := s.Ready()
		return nil, fmt.Errorf("%w: %v", ErrNoWorker, cause)
	}
	s.submitters.Add(1)
	s.pending.Add(1)
	s.mu.Unlock()
	defer s.submitters.Done()

	var err error
	if s.cfg.QueuePolicy == Reject {
		select {
		case s.queue <- c:
		default:
			err = ErrQueueFull
		}
	} else {
		select {
		case s.queue <- c:
		case <-s.quit:
			err = ErrServerClosed
		case <-c.ctx.Done():
			err = c.ctx.Err()
		}
	}
	if err != nil {
		s.pending.Done()
		s.counts.rejected.Add(1)
		c.release()
		return nil, err
	}
	s.counts.accepted.Add(1)
	return c, nil
}

// Infer submits in and waits for its logits. If ctx ends first it returns ctx's
// error and the server discards the result.
func (s *Server) Infer(ctx context.Context, in Tensor) (*Response, error) {
	c, err := s.Submit(ctx, Request{Input: in})
	if err != nil {
		return nil, err
	}
	select {
	case <-c.done:
		return c.Result()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *Call) release() {
	if c.cancel != nil {
		c.cancel()
	}
}

// finish answers c once; later calls do nothing.
func (s *Server) finish(c *Call, logits []float32, err error) {
	if c.claim() {
		s.complete(c, logits, err)
	}
}

// claim reports whether the caller is the one to answer c (and must then call
// complete). Whoever delivers logits claims the call before writing into the
// caller's buffer, so nothing is written there after c was answered.
func (c *Call) claim() bool { return c.answered.CompareAndSwap(false, true) }

// complete answers a claimed call. On success the logits rows are in logits
// and the timing fields are set.
func (s *Server) complete(c *Call, logits []float32, err error) {
	if err == nil {
		if e := c.ctx.Err(); e != nil {
			err = e // abandoned while in flight: discard the result
		}
	}
	switch {
	case err == nil:
		c.resp.Logits = Tensor{Shape: []int{c.n, s.classes}, Data: logits}
		s.counts.completed.Add(1)
		t := &c.resp.Timing
		s.rec.Observe(t.Latency())
		s.rec.ObserveStage(metrics.Queue, t.Queue)
		s.rec.ObserveStage(metrics.CopyIn, t.CopyIn)
		s.rec.ObserveStage(metrics.Compute, t.Compute)
		s.rec.ObserveStage(metrics.CopyOut, t.CopyOut)
	case errors.Is(err, context.Canceled):
		s.counts.cancelled.Add(1)
	case errors.Is(err, context.DeadlineExceeded):
		s.counts.expired.Add(1)
	default:
		s.counts.failed.Add(1)
	}
	c.err = err
	c.release()
	close(c.done)
	s.pending.Done()
}

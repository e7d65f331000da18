package inference

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Request is one inference request.
type Request struct {
	// Input is the batch, [n, 3, H, W] NCHW, float32 or uint8 (see
	// Tensor.Datatype). The server reads it
	// until the call is answered (a call that Close answers early: until
	// Close returns); the caller must not change it before then. Infer
	// returns only once the server no longer reads it.
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
	// DeviceLogits, if not zero, receives the logits in GPU memory from
	// Server.OpenIPC instead, exactly 4*n*Classes bytes, copied device to
	// device; the Response's Logits.Data is then nil. The server writes it
	// until the call is answered, as it reads Input.
	DeviceLogits DeviceMemory
}

// Response is the answer to one request.
type Response struct {
	// Logits is [n, classes], owned by the caller; its Data is nil when the
	// logits went to Request.DeviceLogits.
	Logits Tensor
	Timing Timing
}

// Timing tells where a request's time went. Every time is read from the host's
// monotonic clock (time.Now), except Sent when the caller sets it.
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
	ctx    context.Context
	cancel context.CancelFunc // of the deadline context, when the request has a timeout
	in     []float32          // Request.Input.Data (float32 input, or uint8 input widened on the host)
	bytes  []uint8            // Request.Input.Bytes, for a back-end that normalises uint8 on the device
	// dev is Request.Input.Device (devUint8: it holds uint8 bytes), devOut
	// Request.DeviceLogits; zero for host memory.
	dev, devOut DeviceMemory
	devUint8    bool
	n           int // images
	done        chan struct{}

	// answered is set by whoever answers the call (claim), exactly once.
	answered atomic.Bool
	queued   bool // in Server.queue; guarded by its mutex, like prev, next and unwatch
	// reading is 1 from admission until the server no longer reads in: the
	// call left the queue unrun, or its batch's back-end Wait returned or
	// failed. Whoever holds the call then calls Done once.
	reading sync.WaitGroup

	// While the call is queued: its links in the queue and the function that
	// stops the watch answering it when ctx ends (nil when ctx never ends).
	prev, next *Call
	unwatch    func() bool

	// resp.Logits.Data holds Request.Logits (or nil) until the call is
	// answered with logits.
	resp Response
	err  error
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

// claim reports whether the caller is the one to answer c (and must then call
// Server.complete). Whoever delivers logits claims the call before writing into
// the caller's buffer, so nothing is written there after c was answered.
func (c *Call) claim() bool { return c.answered.CompareAndSwap(false, true) }

// release frees the call's deadline context, if it has one.
func (c *Call) release() {
	if c.cancel != nil {
		c.cancel()
	}
}

// stopWatch stops the watch of a call that left the queue (so that it never
// fires for a call a worker holds). The caller holds the call; the queue's
// mutex ordered the last change of unwatch before.
func (c *Call) stopWatch() {
	if c.unwatch != nil {
		c.unwatch()
		c.unwatch = nil
	}
}

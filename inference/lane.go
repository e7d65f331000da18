package inference

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/fault"
	"github.com/inferbench/inferbench/inference/metrics"
	"github.com/inferbench/inferbench/inference/trace"
)

// lane is one worker's connection to the server, shared by the serial and
// overlap workers: it takes batches, marks them in flight, answers their calls
// and records their figures in the worker's own shard (so completions of
// different workers never contend).
type lane struct {
	s     *Server
	id    int
	w     backend.Worker
	shard *metrics.Shard // latency and stage figures of the calls it completes

	_              [64]byte // keep the counters off other lanes' cache lines
	batches, items atomic.Uint64
	_              [64]byte
}

// next returns the next batch for the worker, or nil when the server closes,
// every worker left service (with dynamic batching) or stop (nil for never)
// closes.
func (l *lane) next(stop <-chan struct{}) *batch {
	s := l.s
	if s.batches != nil {
		select {
		case b := <-s.batches:
			return b
		case <-s.quit:
		case <-stop:
		}
		return nil
	}
	c, _ := s.queue.take(s.quit, stop, nil, s.cfg.IdlePoll)
	if c == nil {
		return nil
	}
	b := s.pool.get()
	b.add(c)
	return b
}

// begin drops the calls whose context ended while they were queued (answering
// them with its error) and marks the batch in flight. It reports whether
// anything is left to run.
func (l *lane) begin(b *batch) bool {
	s := l.s
	b.started = time.Now()
	if !b.keep(func(c *Call) bool {
		if err := c.ctx.Err(); err != nil {
			c.reading.Done()
			s.finish(c, nil, err)
			return false
		}
		return true
	}) {
		s.pool.put(b)
		return false
	}
	s.mu.Lock()
	s.inflight[b] = struct{}{}
	s.mu.Unlock()
	return true
}

// requeue gives the calls of a batch that the worker took but cannot run (for
// cause) back to the queue for the workers still in service. A call the queue
// refuses is answered with the queue's final error (ErrNoWorker wrapping the
// last worker's cause) or, when the queue is full, with cause as a
// *WorkerError.
func (l *lane) requeue(b *batch, cause error) {
	s := l.s
	for i := len(b.calls) - 1; i >= 0; i-- { // pushed to the front: last first
		c := b.calls[i]
		if err := s.queue.requeue(c); err != nil {
			if errors.Is(err, ErrQueueFull) {
				err = &WorkerError{Worker: l.id, Err: cause}
			}
			c.reading.Done()
			s.finish(c, nil, err)
		}
	}
	s.pool.put(b)
}

// deliver scatters the logits of b, whose Wait returned, to its calls and
// answers them.
func (l *lane) deliver(b *batch) {
	s := l.s
	done := time.Now()
	out := l.w.Output(b.slot)
	l.batches.Add(1)
	l.items.Add(uint64(b.n))
	var stages [metrics.NumStages]time.Duration
	stages[metrics.CopyIn], stages[metrics.Compute], stages[metrics.CopyOut] = span(b.copyIn), span(b.compute), span(b.copyOut)
	if b.times.Valid {
		stages[metrics.CopyIn], stages[metrics.Compute], stages[metrics.CopyOut] = b.times.H2D, b.times.Compute, b.times.D2H
	}
	b.doneReading() // Wait returned: the back-end reads no input any more
	tracing := s.cfg.Trace != nil
	off := 0
	for _, c := range b.calls {
		rows := c.n * s.classes
		src := out[off : off+rows]
		off += rows
		t := &c.resp.Timing
		if tracing {
			b.traced = append(b.traced, trace.Request{ID: t.ID, Images: c.n, Sent: t.Sent, Admitted: t.Admitted})
		}
		if !c.claim() {
			continue // answered already (Close): leave the caller's buffer alone
		}
		var logits []float32 // none for device logits: CopyOutDevice wrote them
		if c.devOut.IsZero() {
			logits = c.resp.Logits.Data // the caller's buffer, if it gave one
			if logits == nil {
				logits = make([]float32, rows)
			}
			// The caller's buffer may be a view of a client's
			// shared-memory region: a fault there fails this call only.
			if err := fault.Copy(logits, src); err != nil {
				s.complete(c, nil, &WorkerError{Worker: l.id, Err: fmt.Errorf("writing the logits: %w", err)}, l.shard, &stages)
				continue
			}
		}
		t.Started, t.Done = b.started, done
		t.Queue = b.started.Sub(t.Admitted)
		t.CopyIn, t.Compute, t.CopyOut = stages[metrics.CopyIn], stages[metrics.Compute], stages[metrics.CopyOut]
		t.Device = b.times.Valid
		t.Worker, t.Batch = l.id, b.n
		stages[metrics.Queue] = t.Queue
		s.complete(c, logits, nil, l.shard, &stages)
	}
	if tracing {
		l.trace(b)
	}
	l.retire(b)
}

func span(s trace.Span) time.Duration { return s.End.Sub(s.Start) }

// trace records b in the configured trace.
func (l *lane) trace(b *batch) {
	tb := &trace.Batch{
		Worker: l.id, Device: trace.CPU, Started: b.started, Delivered: time.Now(),
		CopyIn: b.copyIn, Compute: b.compute, CopyOut: b.copyOut,
		DeviceTimed: b.times.Valid, H2D: b.times.H2D, ComputeDev: b.times.Compute, D2H: b.times.D2H,
		Requests: b.traced,
	}
	if l.s.info.GPU {
		tb.Device = l.w.Device()
	}
	l.s.cfg.Trace.Batch(tb)
}

// fail answers every call of b with err wrapped as a *WorkerError. The
// back-end reads b's input no more.
func (l *lane) fail(b *batch, err error) {
	werr := &WorkerError{Worker: l.id, Err: err}
	b.doneReading()
	for _, c := range b.calls {
		l.s.finish(c, nil, werr)
	}
	l.retire(b)
}

// retire takes b out of flight and recycles it.
func (l *lane) retire(b *batch) {
	s := l.s
	s.mu.Lock()
	delete(s.inflight, b)
	s.mu.Unlock()
	s.pool.put(b)
}

// bind prepares the calling goroutine to drive the worker (backend.Worker.Bind).
func (l *lane) bind() (release func(), err error) {
	release, err = l.w.Bind()
	if err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	return release, nil
}

// guard runs one back-end step, turning a panic into an error; a memory
// fault (a shared-memory region shrunk under the server, read or written in
// place) is a *fault.Error.
func guard(step string, f func() error) (err error) {
	defer fault.Restore(fault.Catch())
	defer func() {
		if r := recover(); r != nil {
			if e := fault.Of(r); e != nil {
				err = fmt.Errorf("%s: %w", step, e)
				return
			}
			err = fmt.Errorf("%s panicked: %v", step, r)
		}
	}()
	if err := f(); err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	return nil
}

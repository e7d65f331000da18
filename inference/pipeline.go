package inference

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/trace"
)

// batch is the unit of work of a worker: one or more calls run together.
type batch struct {
	calls []*Call
	parts [][]float32
	n     int
	slot  int

	started time.Time
	// Wall-clock stage spans; copy-out includes the wait for the logits.
	copyIn, compute, copyOut trace.Span
	times                    backend.Times
	traced                   []trace.Request // reused by Server.trace
}

func (s *Server) getBatch() *batch {
	if b, ok := s.batchBuf.Get().(*batch); ok {
		return b
	}
	return &batch{}
}

func (s *Server) putBatch(b *batch) {
	clear(b.calls)
	clear(b.parts)
	*b = batch{calls: b.calls[:0], parts: b.parts[:0], traced: b.traced[:0]}
	s.batchBuf.Put(b)
}

// next returns the next batch for a worker, or nil when the server or stop
// (which may be nil) closes.
func (s *Server) next(stop <-chan struct{}) *batch {
	if s.batches != nil {
		select {
		case b := <-s.batches:
			return b
		case <-s.quit:
		case <-stop:
		}
		return nil
	}
	select {
	case c := <-s.queue:
		b := s.getBatch()
		b.add(c)
		return b
	case <-s.quit:
	case <-stop:
	}
	return nil
}

// requeue gives the calls of a batch that a dying worker took back to the
// queue for the workers still in service.
func (s *Server) requeue(b *batch, cause error) {
	for _, c := range b.calls {
		select {
		case s.queue <- c:
		default:
			s.finish(c, nil, cause)
		}
	}
	if s.live.Load() == 0 {
		s.failQueued(fmt.Errorf("%w: %v", ErrNoWorker, cause))
	}
	s.putBatch(b)
}

func (b *batch) add(c *Call) {
	b.calls = append(b.calls, c)
	b.parts = append(b.parts, c.in.Data)
	b.n += c.n
}

// begin drops the calls whose context ended while they were queued and marks the
// batch in flight. It reports whether anything is left to run.
func (s *Server) begin(b *batch) bool {
	b.started = time.Now()
	kept := b.calls[:0]
	for _, c := range b.calls {
		if err := c.ctx.Err(); err != nil {
			s.finish(c, nil, err)
			continue
		}
		kept = append(kept, c)
	}
	if len(kept) != len(b.calls) {
		clear(b.calls[len(kept):])
		b.calls = kept
		b.parts, b.n = b.parts[:0], 0
		for _, c := range kept {
			b.parts = append(b.parts, c.in.Data)
			b.n += c.n
		}
	}
	if len(kept) == 0 {
		s.putBatch(b)
		return false
	}
	s.mu.Lock()
	s.inflight[b] = struct{}{}
	s.mu.Unlock()
	return true
}

// deliver scatters the logits of b to its calls and answers them.
func (s *Server) deliver(id int, w backend.Worker, b *batch) {
	done := time.Now()
	out := w.Output(b.slot)
	s.counts.batches.Add(1)
	s.counts.items.Add(uint64(b.n))
	copyIn, compute, copyOut := span(b.copyIn), span(b.compute), span(b.copyOut)
	if b.times.Valid {
		copyIn, compute, copyOut = b.times.H2D, b.times.Compute, b.times.D2H
	}
	off := 0
	for _, c := range b.calls {
		rows := c.n * s.classes
		src := out[off : off+rows]
		off += rows
		if !c.claim() {
			continue // answered already (Close): leave the caller's buffer alone
		}
		logits := c.out
		if logits == nil {
			logits = make([]float32, rows)
		}
		copy(logits, src)
		t := &c.resp.Timing
		t.Started, t.Done = b.started, done
		t.Queue = b.started.Sub(t.Admitted)
		t.CopyIn, t.Compute, t.CopyOut, t.Device = copyIn, compute, copyOut, b.times.Valid
		t.Worker, t.Batch = id, b.n
		s.complete(c, logits, nil)
	}
	if s.cfg.Trace != nil {
		s.trace(id, w, b)
	}
	s.retire(b)
}

func span(s trace.Span) time.Duration { return s.End.Sub(s.Start) }

// trace records b in the configured trace.
func (s *Server) trace(id int, w backend.Worker, b *batch) {
	tb := &trace.Batch{
		Worker: id, Device: trace.CPU, Started: b.started, Delivered: time.Now(),
		CopyIn: b.copyIn, Compute: b.compute, CopyOut: b.copyOut,
		DeviceTimed: b.times.Valid, H2D: b.times.H2D, ComputeDev: b.times.Compute, D2H: b.times.D2H,
	}
	if s.gpu {
		tb.Device = w.Device()
	}
	for _, c := range b.calls {
		t := &c.resp.Timing
		b.traced = append(b.traced, trace.Request{ID: t.ID, Images: c.n, Sent: t.Sent, Admitted: t.Admitted})
	}
	tb.Requests = b.traced
	s.cfg.Trace.Batch(tb)
}

// fail answers every call of b with err wrapped as a *WorkerError.
func (s *Server) fail(id int, b *batch, err error) {
	werr := &WorkerError{Worker: id, Err: err}
	for _, c := range b.calls {
		s.finish(c, nil, werr)
	}
	s.retire(b)
}

func (s *Server) retire(b *batch) {
	s.mu.Lock()
	delete(s.inflight, b)
	s.mu.Unlock()
	s.putBatch(b)
}

// guard runs one back-end step, turning a panic into an error.
func guard(step string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s panicked: %v", step, r)
		}
	}()
	if err := f(); err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	return nil
}

// lost takes worker id out of service if err says its device is gone, and
// reports whether it did.
func (s *Server) lost(id int, err error) bool {
	if !errors.Is(err, backend.ErrDeviceLost) {
		return false
	}
	cause := error(&WorkerError{Worker: id, Err: err})
	s.downCause.Store(&cause)
	if s.live.Add(-1) == 0 {
		// Nobody is left to serve what is queued.
		s.failQueued(fmt.Errorf("%w: %v", ErrNoWorker, cause))
	}
	return true
}

func (s *Server) startWorker(id int, w backend.Worker) {
	if s.cfg.Pipeline == Overlap {
		s.startOverlap(id, w)
		return
	}
	s.goroutines.Add(1)
	go func() {
		defer s.goroutines.Done()
		release := w.Bind()
		defer release()
		for {
			b := s.next(nil)
			if b == nil {
				return
			}
			if !s.begin(b) {
				continue
			}
			err := s.runSerial(w, b)
			if err != nil {
				s.fail(id, b, err)
				if s.lost(id, err) {
					return
				}
				continue
			}
			s.deliver(id, w, b)
		}
	}()
}

// runSerial runs the four steps of b on slot 0, timing each on the wall clock.
func (s *Server) runSerial(w backend.Worker, b *batch) error {
	t0 := time.Now()
	if err := guard("copy-in", func() error { return w.CopyIn(0, b.parts) }); err != nil {
		return err
	}
	t1 := time.Now()
	if err := guard("compute", func() error { return w.Compute(0, b.n) }); err != nil {
		return err
	}
	t2 := time.Now()
	if err := guard("copy-out", func() error { return w.CopyOut(0, b.n) }); err != nil {
		return err
	}
	err := guard("wait", func() (err error) { b.times, err = w.Wait(0); return err })
	b.copyIn, b.compute, b.copyOut = trace.Span{Start: t0, End: t1}, trace.Span{Start: t1, End: t2}, trace.Span{Start: t2, End: time.Now()}
	return err
}

// startOverlap runs worker id as three goroutines, copy-in, compute and
// copy-out, passing batches through channels; w.Slots() batches are in flight.
func (s *Server) startOverlap(id int, w backend.Worker) {
	free := make(chan int, w.Slots())
	for i := 0; i < w.Slots(); i++ {
		free <- i
	}
	toCompute := make(chan *batch, w.Slots())
	toCopyOut := make(chan *batch, w.Slots())
	// staged holds a token while a copied-in batch waits for the compute stage,
	// so a worker takes the next request from the shared queue only once its
	// previous one is computing: copies still overlap compute, but one worker
	// cannot hoard queued requests in its slots while another sits idle.
	staged := make(chan struct{}, 1)
	// dead is closed when the worker's device is lost: no stage calls it again.
	dead := make(chan struct{})
	var once sync.Once
	step := func(b *batch, name string, f func() error) bool {
		select {
		case <-dead:
			s.fail(id, b, fmt.Errorf("%s: %w", name, backend.ErrDeviceLost))
			return false
		default:
		}
		if err := guard(name, f); err != nil {
			s.fail(id, b, err)
			if errors.Is(err, backend.ErrDeviceLost) {
				once.Do(func() { s.lost(id, err); close(dead) })
			}
			return false
		}
		return true
	}

	s.goroutines.Add(3)
	go func() { // copy-in
		defer s.goroutines.Done()
		defer close(toCompute)
		release := w.Bind()
		defer release()
		for {
			var slot int
			select {
			case slot = <-free:
			case <-dead:
				return
			}
			select {
			case staged <- struct{}{}:
			case <-dead:
				return
			}
			b := s.next(dead)
			if b == nil {
				return
			}
			select {
			case <-dead:
				s.requeue(b, fmt.Errorf("%w: worker %d", backend.ErrDeviceLost, id))
				return
			default:
			}
			if !s.begin(b) {
				<-staged
				free <- slot
				continue
			}
			b.slot = slot
			t0 := time.Now()
			if !step(b, "copy-in", func() error { return w.CopyIn(slot, b.parts) }) {
				<-staged
				free <- slot
				continue
			}
			b.copyIn = trace.Span{Start: t0, End: time.Now()}
			toCompute <- b
		}
	}()
	go func() { // compute
		defer s.goroutines.Done()
		defer close(toCopyOut)
		release := w.Bind()
		defer release()
		for b := range toCompute {
			<-staged
			slot := b.slot
			t0 := time.Now()
			if !step(b, "compute", func() error { return w.Compute(slot, b.n) }) {
				free <- slot
				continue
			}
			b.compute = trace.Span{Start: t0, End: time.Now()}
			toCopyOut <- b
		}
	}()
	go func() { // copy-out and delivery
		defer s.goroutines.Done()
		release := w.Bind()
		defer release()
		for b := range toCopyOut {
			slot := b.slot
			t0 := time.Now()
			ok := step(b, "copy-out", func() error { return w.CopyOut(slot, b.n) }) &&
				step(b, "wait", func() (err error) { b.times, err = w.Wait(slot); return err })
			if ok {
				b.copyOut = trace.Span{Start: t0, End: time.Now()}
				s.deliver(id, w, b)
			}
			free <- slot
		}
	}()
}

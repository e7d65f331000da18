package inference

import (
	"slices"
	"time"
)

// batcher merges queued requests into batches for the workers (dynamic
// batching). A batch is sent when it reaches MaxBatch images or one of
// PreferredBatches, when the next request would not fit, or when its first
// request has waited MaxQueueDelay. A request is never split, and a batch
// holds requests of one input datatype (the next of another type starts the
// next batch).
//
// The batcher owns the calls it has taken from the queue until a worker
// receives their batch: when the server closes, or the last worker leaves
// service, it answers them itself and stops.
type batcher struct {
	s *Server
}

// run merges until the server closes or no worker is left. The caller added it
// to Server.goroutines.
func (m batcher) run() {
	s := m.s
	defer s.goroutines.Done()
	cfg := &s.cfg
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var carry *Call // taken, but did not fit the previous batch
	for {
		first := carry
		carry = nil
		if first == nil {
			if first, _ = s.queue.take(s.quit, s.down, nil, s.cfg.IdlePoll); first == nil {
				return
			}
		}
		b := s.pool.get()
		b.add(first)
		if !m.full(b) { // wait for company
			timer.Reset(time.Until(first.resp.Timing.Admitted.Add(cfg.MaxQueueDelay)))
		fill:
			for !m.full(b) {
				c, why := s.queue.take(s.quit, s.down, timer.C, 0)
				switch {
				case c == nil && why == timedOut:
					break fill
				case c == nil:
					timer.Stop()
					m.abandon(b, carry, why)
					return
				case b.n+c.n > cfg.MaxBatch || !b.fits(c):
					carry = c
					break fill
				}
				b.add(c)
			}
			timer.Stop()
		}
		select {
		case s.batches <- b:
		case <-s.quit:
			m.abandon(b, carry, quitting)
			return
		case <-s.down:
			m.abandon(b, carry, stopped)
			return
		}
	}
}

// full reports whether b is sent without waiting for more: it holds MaxBatch
// images or one of PreferredBatches.
func (m batcher) full(b *batch) bool {
	return b.n >= m.s.cfg.MaxBatch || slices.Contains(m.s.cfg.PreferredBatches, b.n)
}

// abandon answers the calls the batcher holds (b and carry, either may be nil)
// when it stops: why is quitting (the server closed) or stopped (no worker is
// left).
func (m batcher) abandon(b *batch, carry *Call, why wake) {
	s := m.s
	err := ErrServerClosed
	if why == stopped {
		err = s.queue.failed() // ErrNoWorker wrapping the last worker's cause
	}
	if b != nil {
		b.doneReading()
		for _, c := range b.calls {
			s.finish(c, nil, err)
		}
		s.pool.put(b)
	}
	if carry != nil {
		carry.reading.Done()
		s.finish(carry, nil, err)
	}
}

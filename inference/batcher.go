package inference

import (
	"slices"
	"time"
)

// batcher merges queued requests into batches (dynamic batching). A batch is
// sent when it reaches MaxBatch images or one of PreferredBatches, when the next
// request would not fit, or when its first request has waited MaxQueueDelay.
// A request is never split.
func (s *Server) batcher() {
	defer s.goroutines.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var carry *Call
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-s.queue:
			case <-s.quit:
				return
			}
		}
		b := s.getBatch()
		b.add(first)
		timer.Reset(time.Until(first.resp.Timing.Admitted.Add(s.cfg.MaxQueueDelay)))
	fill:
		for b.n < s.cfg.MaxBatch && !slices.Contains(s.cfg.PreferredBatches, b.n) {
			select {
			case c := <-s.queue:
				if b.n+c.n > s.cfg.MaxBatch {
					carry = c
					break fill
				}
				b.add(c)
			case <-timer.C:
				break fill
			case <-s.quit:
				s.abandon(b, carry)
				return
			}
		}
		timer.Stop()
		select {
		case s.batches <- b:
		case <-s.quit:
			s.abandon(b, carry)
			return
		}
	}
}

// abandon answers the calls the batcher holds when the server closes.
func (s *Server) abandon(b *batch, carry *Call) {
	for _, c := range b.calls {
		s.finish(c, nil, ErrServerClosed)
	}
	if carry != nil {
		s.finish(carry, nil, ErrServerClosed)
	}
	s.putBatch(b)
}

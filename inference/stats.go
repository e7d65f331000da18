package inference

import (
	"sync/atomic"

	"github.com/inferbench/inferbench/inference/metrics"
)

type counters struct {
	accepted, completed, failed, rejected, cancelled, expired atomic.Uint64
	batches, items                                            atomic.Uint64
}

// Stats is a snapshot of a server's counters and measurements.
type Stats struct {
	Accepted  uint64 // requests queued by Submit
	Completed uint64 // answered with logits
	Failed    uint64 // answered with a worker error or ErrServerClosed
	Rejected  uint64 // refused by Submit (bad input, queue full, closed, no worker)
	Cancelled uint64 // abandoned by their caller (context cancelled)
	Expired   uint64 // past their deadline
	Queued    int    // waiting for a worker now

	Batches uint64 // batches executed
	Items   uint64 // images in those batches

	// Recorded holds the latency distribution (from each request's send time to
	// its logits on the host) and per-stage means of completed requests.
	Recorded metrics.RecorderSnapshot
}

// MeanBatch is Items / Batches, the mean executed batch size.
func (s Stats) MeanBatch() float64 {
	if s.Batches == 0 {
		return 0
	}
	return float64(s.Items) / float64(s.Batches)
}

// Stats returns a snapshot of the server's counters and measurements.
func (s *Server) Stats() Stats {
	return Stats{
		Accepted: s.counts.accepted.Load(), Completed: s.counts.completed.Load(),
		Failed: s.counts.failed.Load(), Rejected: s.counts.rejected.Load(),
		Cancelled: s.counts.cancelled.Load(), Expired: s.counts.expired.Load(),
		Queued:  len(s.queue),
		Batches: s.counts.batches.Load(), Items: s.counts.items.Load(),
		Recorded: s.rec.Snapshot(),
	}
}

// ResetStats clears the latency and stage measurements (not the counters), for
// example after a warm-up phase.
func (s *Server) ResetStats() { s.rec.Reset() }

package inference

import (
	"sync/atomic"

	"github.com/inferbench/inferbench/inference/metrics"
)

// counters are the outcomes that Submit and the error paths count; the
// figures of completed requests live in the workers' metrics shards.
type counters struct {
	accepted, rejected         atomic.Uint64
	_                          [64]byte // Submit's counters apart from the answers'
	failed, cancelled, expired atomic.Uint64
}

// Stats is a snapshot of a server's figures. Every field but Queued is
// cumulative since New and never decreases (nothing resets them): subtract an
// earlier snapshot (Sub) for the figures of an interval. Each accepted request
// ends in exactly one of Completed, Failed, Cancelled and Expired when it is
// answered.
//
// Durations are read from the host's monotonic clock, except where a stage is
// device-timed (see Timing.Device): a back-end that times stages on the device
// (CUDA events) reports CopyIn, Compute and CopyOut in device time for every
// batch.
type Stats struct {
	// Accepted counts requests Submit queued.
	Accepted uint64
	// Completed counts requests answered with logits.
	Completed uint64
	// Failed counts requests answered with a worker error, ErrNoWorker or
	// ErrServerClosed.
	Failed uint64
	// Rejected counts requests Submit refused: bad input, queue full, server
	// closed, no worker, a nil context, or a context or deadline already over
	// at Submit (such a request is refused, never queued).
	Rejected uint64
	// Cancelled counts accepted requests answered with context.Canceled:
	// their caller's context was cancelled before they were answered.
	Cancelled uint64
	// Expired counts accepted requests answered with
	// context.DeadlineExceeded: their deadline passed before they were
	// answered.
	Expired uint64
	// Queued is how many requests wait for a worker now (not cumulative: Sub
	// keeps the later value).
	Queued int

	// Batches counts executed batches whose logits were delivered; Items
	// counts their images.
	Batches uint64
	Items   uint64

	// Latency is the distribution of the latency of Completed requests: from
	// the request's send time (Request.Sent, or Submit's time) to its logits
	// on the host (Timing.Latency). Latency.Count equals Completed.
	Latency metrics.Distribution
	// Stages holds, per metrics.Stage, the time Completed requests spent in
	// that stage: Queue from admission to a worker's taking the batch
	// (Timing.Queue), then their batch's copy-in, compute and copy-out
	// (Timing.CopyIn, Compute, CopyOut; device-timed where the back-end times
	// stages). Every Count equals Completed; Sum / Count is the stage's mean.
	Stages [metrics.NumStages]metrics.StageStats
}

// MeanBatch is Items / Batches, the mean executed batch size, or 0 when no
// batch was executed.
func (s Stats) MeanBatch() float64 {
	if s.Batches == 0 {
		return 0
	}
	return float64(s.Items) / float64(s.Batches)
}

// Sub returns the figures of the interval between earlier, a snapshot of the
// same server, and s: every cumulative field is differenced (latency
// quantiles of the interval come from the differenced histogram), and Queued
// is s's.
func (s Stats) Sub(earlier Stats) Stats {
	d := Stats{
		Accepted:  s.Accepted - earlier.Accepted,
		Completed: s.Completed - earlier.Completed,
		Failed:    s.Failed - earlier.Failed,
		Rejected:  s.Rejected - earlier.Rejected,
		Cancelled: s.Cancelled - earlier.Cancelled,
		Expired:   s.Expired - earlier.Expired,
		Queued:    s.Queued,
		Batches:   s.Batches - earlier.Batches,
		Items:     s.Items - earlier.Items,
		Latency:   s.Latency.Sub(earlier.Latency),
	}
	for i := range s.Stages {
		d.Stages[i] = s.Stages[i].Sub(earlier.Stages[i])
	}
	return d
}

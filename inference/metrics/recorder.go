package metrics

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Stage is one step of a request's path through the server.
type Stage int

const (
	// Queue is the time from admission until a worker takes the request.
	Queue Stage = iota
	// CopyIn is the host-to-device copy of the input.
	CopyIn
	// Compute is the forward pass.
	Compute
	// CopyOut is the device-to-host copy of the logits.
	CopyOut

	// NumStages is the number of stages; Stage values run from 0 to NumStages-1.
	NumStages = int(CopyOut) + 1
)

var stageNames = [NumStages]string{"queue", "h2d", "compute", "d2h"}

// String returns "queue", "h2d", "compute" or "d2h", the prefixes of the
// benchmark units ("queue-ns", ...).
func (s Stage) String() string {
	if s >= 0 && int(s) < NumStages {
		return stageNames[s]
	}
	return fmt.Sprintf("Stage(%d)", int(s))
}

// StageStats is the cumulative time that Count requests spent in one stage.
type StageStats struct {
	Count uint64        // requests observed
	Sum   time.Duration // their total time in the stage
}

// Mean is Sum/Count, or 0 when Count is 0.
func (s StageStats) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / time.Duration(s.Count)
}

// Sub returns the figures of the requests observed after earlier, a snapshot
// of the same stage taken before s.
func (s StageStats) Sub(earlier StageStats) StageStats {
	return StageStats{Count: subCount(s.Count, earlier.Count), Sum: s.Sum - earlier.Sum}
}

// subCount is a - b, or 0 when b > a (snapshots passed in the wrong order or
// from different recorders).
func subCount(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// RecorderSnapshot is what a Recorder holds at one moment: cumulative figures
// since the Recorder was made.
type RecorderSnapshot struct {
	// Latency is the distribution of the observed latencies.
	Latency Distribution
	// Stages is indexed by Stage; every observation adds to every stage, so
	// each Count equals Latency.Count.
	Stages [NumStages]StageStats
}

// Sub returns the figures of the observations made after earlier, a snapshot
// of the same Recorder taken before s.
func (s RecorderSnapshot) Sub(earlier RecorderSnapshot) RecorderSnapshot {
	d := RecorderSnapshot{Latency: s.Latency.Sub(earlier.Latency)}
	for i := range s.Stages {
		d.Stages[i] = s.Stages[i].Sub(earlier.Stages[i])
	}
	return d
}

// A Recorder accumulates the latency distribution and the per-stage time of
// observed requests. Its figures only grow: there is no reset; difference two
// snapshots (RecorderSnapshot.Sub) for an interval.
//
// Observations go to Shards, lock-free (atomic adds): give every goroutine that
// observes its own Shard and observations never contend. Snapshot may run
// concurrently with observations; a snapshot taken while a request is being
// observed may count its latency in Latency before its stage times reach
// Stages[i].Sum, or the reverse.
type Recorder struct {
	shards []Shard
}

// NewRecorder returns a Recorder with n shards (at least 1).
func NewRecorder(n int) *Recorder {
	return &Recorder{shards: make([]Shard, max(n, 1))}
}

// Shard returns shard i, 0 <= i < the n given to NewRecorder.
func (r *Recorder) Shard(i int) *Shard { return &r.shards[i] }

// Snapshot returns the sum of every shard's figures.
func (r *Recorder) Snapshot() RecorderSnapshot {
	var counts [numBuckets]uint64
	var s RecorderSnapshot
	for i := range r.shards {
		sh := &r.shards[i]
		for j := range counts {
			counts[j] += sh.counts[j].Load()
		}
		s.Latency.Sum += time.Duration(sh.sum.Load())
		for st := range s.Stages {
			s.Stages[st].Sum += time.Duration(sh.stages[st].Load())
		}
	}
	s.Latency = newDistribution(counts[:], s.Latency.Sum)
	for st := range s.Stages {
		s.Stages[st].Count = s.Latency.Count
	}
	return s
}

// A Shard is the part of a Recorder that one goroutine writes. It is safe for
// concurrent use (every field is atomic); sharing one only costs contention.
type Shard struct {
	sum    atomic.Int64 // latencies, nanoseconds
	stages [NumStages]atomic.Int64
	_      [64]byte // keep the sums off the neighbouring shard's cache line
	counts [numBuckets]atomic.Uint64
	_      [64]byte
}

// Observe records one request: its latency (a negative one is recorded as 0,
// as Histogram.Record does) and the time it spent in each stage. It does not
// allocate.
func (sh *Shard) Observe(latency time.Duration, stages [NumStages]time.Duration) {
	v := max(int64(latency), 0)
	sh.sum.Add(v)
	for i, d := range stages {
		sh.stages[i].Add(int64(d))
	}
	sh.counts[bucketOf(v)].Add(1)
}

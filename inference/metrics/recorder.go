package metrics

import (
	"fmt"
	"sync"
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

// StageStats is the time spent in one stage.
type StageStats struct {
	Count int64         // observations
	Sum   time.Duration // their total
	Mean  time.Duration // Sum/Count, 0 when Count is 0
}

// RecorderSnapshot is what a Recorder holds at one moment.
type RecorderSnapshot struct {
	Summary Summary               // latency figures
	Stages  [NumStages]StageStats // indexed by Stage
}

// A Recorder collects request latencies in a Histogram and sums the time spent
// in each Stage. It is safe for concurrent use; the zero value is ready.
// A Recorder must not be copied after first use.
type Recorder struct {
	mu     sync.Mutex
	hist   Histogram
	stages [NumStages]struct{ count, sum int64 }
}

// Observe records the latency of one request.
func (r *Recorder) Observe(latency time.Duration) {
	r.mu.Lock()
	r.hist.Record(latency)
	r.mu.Unlock()
}

// ObserveStage adds d to the time spent in stage. It panics if stage is not
// one of the Stage constants.
func (r *Recorder) ObserveStage(stage Stage, d time.Duration) {
	if stage < 0 || int(stage) >= NumStages {
		panic(fmt.Sprintf("metrics: ObserveStage with invalid %v", stage))
	}
	r.mu.Lock()
	st := &r.stages[stage]
	st.count++
	st.sum += int64(d)
	r.mu.Unlock()
}

// Snapshot returns the latency summary and the per-stage figures.
func (r *Recorder) Snapshot() RecorderSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := RecorderSnapshot{Summary: r.hist.Summary()}
	for i, st := range r.stages {
		s.Stages[i] = StageStats{Count: st.count, Sum: time.Duration(st.sum)}
		if st.count > 0 {
			s.Stages[i].Mean = time.Duration(st.sum / st.count)
		}
	}
	return s
}

// Histogram returns a copy of the latency histogram.
func (r *Recorder) Histogram() Histogram {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hist
}

// Reset forgets everything observed so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.hist.Reset()
	r.stages = [NumStages]struct{ count, sum int64 }{}
	r.mu.Unlock()
}

package metrics

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStageString(t *testing.T) {
	tests := []struct {
		s    Stage
		want string
	}{
		{Queue, "queue"},
		{CopyIn, "h2d"},
		{Compute, "compute"},
		{CopyOut, "d2h"},
		{Stage(9), "Stage(9)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.s.String(), "Stage(%d).String()", int(tt.s))
	}
}

func TestRecorderConcurrent(t *testing.T) {
	var r Recorder
	const goroutines, each = 8, 1000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				r.Observe(time.Duration(g*each+i+1) * time.Microsecond)
				r.ObserveStage(Queue, time.Microsecond)
				r.ObserveStage(Compute, time.Duration(g+1)*time.Millisecond)
			}
		})
	}
	wg.Wait()

	s := r.Snapshot()
	require.Equal(t, int64(goroutines*each), s.Summary.Count)
	assert.Equal(t, time.Microsecond, s.Summary.Min)
	assert.Equal(t, goroutines*each*time.Microsecond, s.Summary.Max)
	assert.InDelta(t, float64(4000*time.Microsecond), float64(s.Summary.P50), 4000e3*RelativeError)

	tests := []struct {
		stage Stage
		want  StageStats
	}{
		{Queue, StageStats{Count: goroutines * each, Sum: goroutines * each * time.Microsecond, Mean: time.Microsecond}},
		// (1+...+8) ms * 1000 / 8000 = 4.5 ms
		{Compute, StageStats{Count: goroutines * each, Sum: 36 * each * time.Millisecond, Mean: 4500 * time.Microsecond}},
		{CopyIn, StageStats{}},
		{CopyOut, StageStats{}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, s.Stages[tt.stage], "stage %v", tt.stage)
	}

	h := r.Histogram()
	assert.Equal(t, s.Summary, h.Summary(), "Histogram() is a copy of the same data")

	r.Reset()
	assert.Equal(t, RecorderSnapshot{}, r.Snapshot())
}

func TestRecorderInvalidStage(t *testing.T) {
	var r Recorder
	assert.Panics(t, func() { r.ObserveStage(Stage(NumStages), time.Second) })
	assert.Panics(t, func() { r.ObserveStage(-1, time.Second) })
}

package metrics

import (
	"math"
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

// stages returns a stage array with queue q and compute c.
func stages(q, c time.Duration) [NumStages]time.Duration {
	return [NumStages]time.Duration{Queue: q, Compute: c}
}

func TestRecorderConcurrent(t *testing.T) {
	// Eight goroutines with a shard each, and two more sharing shard 0.
	const goroutines, each = 10, 1000
	r := NewRecorder(8)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			sh := r.Shard(g % 8)
			for i := range each {
				sh.Observe(time.Duration(g*each+i+1)*time.Microsecond, stages(time.Microsecond, time.Duration(g+1)*time.Millisecond))
			}
		})
	}
	wg.Wait()

	s := r.Snapshot()
	const n = goroutines * each
	require.Equal(t, uint64(n), s.Latency.Count)
	assert.Equal(t, time.Duration(n*(n+1)/2)*time.Microsecond, s.Latency.Sum, "1 + 2 + ... + n µs")
	assert.InEpsilon(t, float64(time.Microsecond), float64(s.Latency.Quantile(0)), RelativeError)
	assert.InEpsilon(t, float64(n*time.Microsecond), float64(s.Latency.Quantile(1)), RelativeError)
	assert.InEpsilon(t, float64(n/2*time.Microsecond), float64(s.Latency.Quantile(0.5)), RelativeError)

	tests := []struct {
		stage Stage
		want  StageStats
	}{
		{Queue, StageStats{Count: n, Sum: n * time.Microsecond}},
		// (1+...+10) ms * 1000
		{Compute, StageStats{Count: n, Sum: 55 * each * time.Millisecond}},
		{CopyIn, StageStats{Count: n}},
		{CopyOut, StageStats{Count: n}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, s.Stages[tt.stage], "stage %v", tt.stage)
	}
	assert.Equal(t, 5500*time.Microsecond, s.Stages[Compute].Mean())
	assert.Zero(t, s.Stages[CopyIn].Mean())
}

func TestRecorderSubIsTheInterval(t *testing.T) {
	r := NewRecorder(2)
	var before, during Histogram
	for i := 1; i <= 500; i++ {
		d := time.Duration(i) * 10 * time.Microsecond
		r.Shard(i%2).Observe(d, stages(d/2, d/4))
		before.Record(d)
	}
	s0 := r.Snapshot()
	var queue time.Duration
	for i := 1; i <= 300; i++ {
		d := time.Duration(i*i) * time.Microsecond
		r.Shard(i%2).Observe(d, stages(d/2, d/4))
		during.Record(d)
		queue += d / 2
	}
	s1 := r.Snapshot()

	d := s1.Sub(s0)
	assert.Equal(t, uint64(during.Count()), d.Latency.Count)
	assert.Equal(t, during.Sum(), d.Latency.Sum)
	assert.Equal(t, during.Mean(), d.Latency.Mean())
	for _, q := range []float64{0.1, 0.5, 0.9, 0.99} {
		assert.Equal(t, during.Quantile(q), d.Latency.Quantile(q), "Quantile(%v) of the interval", q)
	}
	assert.Equal(t, StageStats{Count: 300, Sum: queue}, d.Stages[Queue])
	assert.Equal(t, s1.Latency.Count, s0.Latency.Count+d.Latency.Count, "figures only grow")

	// The wrong order gives nothing, not a wrapped-around count.
	back := s0.Sub(s1)
	assert.Zero(t, back.Latency.Count)
	assert.Zero(t, back.Stages[Queue].Count)
}

func TestDistributionCountAtOrBelow(t *testing.T) {
	r := NewRecorder(1)
	for v := 1; v <= 1000; v++ { // 1 ns ... 1000 ns
		r.Shard(0).Observe(time.Duration(v), [NumStages]time.Duration{})
	}
	d := r.Snapshot().Latency
	tests := []struct {
		name string
		x    time.Duration
		want uint64
	}{
		{"negative", -1, 0},
		{"zero", 0, 0},
		{"exact region", 200, 200},
		{"last exact value", 255, 255},
		// From 512 ns buckets are 4 ns wide: [996, 999], [1000, 1003].
		{"bottom of a bucket counts only the buckets below", 1000, 999},
		{"inside a bucket", 1001, 999},
		{"top of a bucket counts it", 1003, 1000},
		{"above everything", time.Hour, 1000},
		{"largest duration", math.MaxInt64, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, d.CountAtOrBelow(tt.x), "CountAtOrBelow(%d)", int64(tt.x))
		})
	}
}

func TestDistributionEmpty(t *testing.T) {
	var d Distribution
	assert.Zero(t, d.Quantile(0.5))
	assert.Zero(t, d.Mean())
	assert.Zero(t, d.CountAtOrBelow(time.Hour))
	assert.Equal(t, d, NewRecorder(3).Snapshot().Latency)
}

func TestDistributionQuantileClamps(t *testing.T) {
	r := NewRecorder(1)
	for _, v := range []time.Duration{10, 20, 30, -5} {
		r.Shard(0).Observe(v, [NumStages]time.Duration{})
	}
	d := r.Snapshot().Latency
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{math.NaN(), 0}, {-1, 0}, {0, 0}, {0.25, 0}, {0.26, 10}, {0.75, 20}, {1, 30}, {2, 30},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, d.Quantile(tt.q), "Quantile(%v)", tt.q)
	}
	assert.Equal(t, time.Duration(60), d.Sum, "a negative latency counts as 0")
}

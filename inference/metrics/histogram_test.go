package metrics

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exactQuantile is the nearest-rank q-quantile of sorted values.
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	if q <= 0 {
		return sorted[0]
	}
	r := int(math.Ceil(q * float64(len(sorted))))
	return sorted[max(1, min(r, len(sorted)))-1]
}

// directStats computes the mean and the population standard deviation in
// float64 with two passes.
func directStats(vs []time.Duration) (mean, std float64) {
	for _, v := range vs {
		mean += float64(v)
	}
	mean /= float64(len(vs))
	var ss float64
	for _, v := range vs {
		d := float64(v) - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(len(vs)))
}

func uniform(lo, hi int) []time.Duration {
	vs := make([]time.Duration, 0, hi-lo+1)
	for v := lo; v <= hi; v++ {
		vs = append(vs, time.Duration(v))
	}
	return vs
}

func bimodal() []time.Duration {
	rng := rand.New(rand.NewPCG(1, 2))
	var vs []time.Duration
	for range 9000 { // fast mode around 200 µs
		vs = append(vs, 200*time.Microsecond+time.Duration(rng.IntN(20_000)))
	}
	for range 1000 { // slow mode around 50 ms
		vs = append(vs, 50*time.Millisecond+time.Duration(rng.IntN(5_000_000)))
	}
	rng.Shuffle(len(vs), func(i, j int) { vs[i], vs[j] = vs[j], vs[i] })
	return vs
}

func lognormal() []time.Duration {
	rng := rand.New(rand.NewPCG(3, 4))
	vs := make([]time.Duration, 50_000)
	for i := range vs {
		vs[i] = time.Duration(math.Exp(13 + 2*rng.NormFloat64())) // ~0.4 ms, wide
	}
	return vs
}

var quantiles = []float64{0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1}

func TestHistogramKnownData(t *testing.T) {
	tests := []struct {
		name string
		data []time.Duration
	}{
		{"uniform 1..100000ns", uniform(1, 100_000)},
		{"constant 1ms", slices.Repeat([]time.Duration{time.Millisecond}, 1000)},
		{"constant 7ns", slices.Repeat([]time.Duration{7}, 10)},
		{"single value", []time.Duration{123_456_789}},
		{"small exact 0..255ns", uniform(0, 255)},
		{"bimodal 200µs/50ms", bimodal()},
		{"lognormal", lognormal()},
		{"hours", []time.Duration{time.Nanosecond, time.Second, time.Hour, 3 * time.Hour, 1<<63 - 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			for _, v := range tt.data {
				h.Record(v)
			}
			sorted := slices.Sorted(slices.Values(tt.data))
			require.Equal(t, int64(len(sorted)), h.Count())
			assert.Equal(t, sorted[0], h.Min(), "Min")
			assert.Equal(t, sorted[len(sorted)-1], h.Max(), "Max")
			assert.Equal(t, sorted[0], h.Quantile(0), "Quantile(0) must be exact")
			assert.Equal(t, sorted[len(sorted)-1], h.Quantile(1), "Quantile(1) must be exact")
			for _, q := range quantiles {
				want := exactQuantile(sorted, q)
				got := h.Quantile(q)
				tol := float64(want) * RelativeError
				assert.InDelta(t, float64(want), float64(got), tol,
					"Quantile(%v) = %v, want %v within %v", q, got, want, RelativeError)
				if want < exactLimit {
					assert.Equal(t, want, got, "Quantile(%v) below %d ns must be exact", q, exactLimit)
				}
			}
			if sorted[len(sorted)-1] < time.Hour*1000 { // sum fits easily
				mean, std := directStats(tt.data)
				assert.InDelta(t, mean, float64(h.Mean()), 1, "Mean")
				assert.InDelta(t, std, float64(h.Std()), 1+std*1e-9, "Std")
			}
		})
	}
}

func TestHistogramUniformPercentiles(t *testing.T) {
	var h Histogram
	for v := 1; v <= 100_000; v++ {
		h.Record(time.Duration(v))
	}
	s := h.Summary()
	tests := []struct {
		name      string
		got, want time.Duration
	}{
		{"P50", s.P50, 50_000},
		{"P90", s.P90, 90_000},
		{"P99", s.P99, 99_000},
		{"P999", s.P999, 99_900},
		{"Min", s.Min, 1},
		{"Max", s.Max, 100_000},
		{"Mean", s.Mean, 50_000}, // 50000.5 truncated
	}
	for _, tt := range tests {
		assert.InDelta(t, float64(tt.want), float64(tt.got), float64(tt.want)*RelativeError,
			"%s = %v, want %v", tt.name, tt.got, tt.want)
	}
	assert.Equal(t, int64(100_000), s.Count)
	// Population std of 1..n is sqrt((n^2-1)/12).
	assert.InDelta(t, math.Sqrt((1e10-1)/12), float64(s.Std), 1)
}

func TestHistogramEmpty(t *testing.T) {
	var h Histogram
	assert.Equal(t, int64(0), h.Count())
	for _, q := range quantiles {
		assert.Equal(t, time.Duration(0), h.Quantile(q), "Quantile(%v)", q)
	}
	assert.Equal(t, Summary{}, h.Summary())
	h.Merge(&Histogram{})
	h.Merge(nil)
	assert.Equal(t, Summary{}, h.Summary())
}

func TestHistogramConstant(t *testing.T) {
	var h Histogram
	const v = 3*time.Second + 141_592_653
	for range 10_000 {
		h.Record(v)
	}
	s := h.Summary()
	assert.Equal(t, Summary{Count: 10_000, Mean: v, Std: 0, Min: v, Max: v, P50: v, P90: v, P99: v, P999: v}, s)
}

func TestHistogramNegativeAndOddQ(t *testing.T) {
	var h Histogram
	h.Record(-5)
	h.Record(10)
	assert.Equal(t, time.Duration(0), h.Min(), "negative values count as 0")
	assert.Equal(t, time.Duration(0), h.Quantile(-1))
	assert.Equal(t, time.Duration(0), h.Quantile(math.NaN()))
	assert.Equal(t, time.Duration(10), h.Quantile(2))
	assert.Equal(t, time.Duration(0), h.Quantile(0.5))
}

func TestHistogramMerge(t *testing.T) {
	a, b := bimodal(), lognormal()
	var ha, hb, both Histogram
	for _, v := range a {
		ha.Record(v)
		both.Record(v)
	}
	for _, v := range b {
		hb.Record(v)
		both.Record(v)
	}
	merged := ha
	merged.Merge(&hb)
	assert.Equal(t, both.counts, merged.counts, "bucket counts")
	assert.Equal(t, both.Summary(), merged.Summary())

	all := append(slices.Clone(a), b...)
	_, std := directStats(all)
	assert.InDelta(t, std, float64(merged.Std()), 1, "Std after Merge")

	var empty Histogram
	empty.Merge(&ha)
	assert.Equal(t, ha.Summary(), empty.Summary(), "merge into empty")

	self := ha
	self.Merge(&self)
	assert.Equal(t, 2*ha.Count(), self.Count())
	assert.Equal(t, ha.Quantile(0.9), self.Quantile(0.9))
	assert.InDelta(t, float64(ha.Std()), float64(self.Std()), 1, "Std of doubled data")

	merged.Reset()
	assert.Equal(t, Histogram{}, merged)
}

func TestHistogramStdPrecision(t *testing.T) {
	// A small spread on a large mean: a naive sum of squares loses it.
	var h Histogram
	var vs []time.Duration
	for i := range 1000 {
		v := time.Hour + time.Duration(i%10)
		vs = append(vs, v)
		h.Record(v)
	}
	_, std := directStats(vs)
	assert.InDelta(t, std, float64(h.Std()), 0.5, "Std = %v, want %.3f", h.Std(), std)
}

func TestBucketsCoverRange(t *testing.T) {
	// Every bucket's bounds map back to it, buckets are contiguous, and the
	// width bound that RelativeError relies on holds.
	var next int64
	for i := range numBuckets {
		lo, w := bucketBounds(i)
		require.Equal(t, next, lo, "bucket %d starts at %d, want %d", i, lo, next)
		require.Equal(t, i, bucketOf(lo), "bucketOf(%d)", lo)
		require.Equal(t, i, bucketOf(lo+w-1), "bucketOf(%d)", lo+w-1)
		if i >= exactLimit {
			require.GreaterOrEqual(t, lo, subBuckets*w, "bucket %d too wide", i)
		}
		next = lo + w
	}
	assert.Equal(t, int64(math.MinInt64), next, "last bucket ends at 2^63")
}

func TestHistogramRecordNoAlloc(t *testing.T) {
	var h Histogram
	allocs := testing.AllocsPerRun(1000, func() { h.Record(12345 * time.Microsecond) })
	assert.Equal(t, 0.0, allocs)
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	vs := lognormal()
	i := 0
	for b.Loop() {
		h.Record(vs[i])
		i++
		if i == len(vs) {
			i = 0
		}
	}
}

func BenchmarkSummary(b *testing.B) {
	var h Histogram
	for _, v := range lognormal() {
		h.Record(v)
	}
	for b.Loop() {
		_ = h.Summary()
	}
}

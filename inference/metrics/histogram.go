// Package metrics measures what a benchmark run reports: latency distributions,
// per-stage time, process CPU utilisation and peak resident memory.
//
// A measurement goes through three steps:
//
//  1. every response's latency is recorded into a Histogram (single goroutine)
//     or a Recorder (lock-free, one Shard per writing goroutine; it also sums
//     per-stage times, and its figures only grow);
//  2. histograms from several sources are combined with Merge; snapshots of a
//     Recorder are differenced with Sub to get an interval's figures;
//  3. a Summary (count, mean, std, min, max, p50, p90, p99, p99.9) or a
//     Distribution's quantiles are read and reported, for example with
//     testing.B.ReportMetric.
//
// A CPUSampler measures the process's CPU time as a share of wall time times
// runtime.NumCPU(), for back-ends without a device sampler of their own.
// ResetPeakRSS and PeakRSS measure the process's peak resident set size over
// an interval (Linux).
package metrics

import (
	"math"
	"math/bits"
	"time"
)

// Bucket layout. Values below 2*subBuckets nanoseconds each have a bucket of
// their own (exact). Above that, every power of two [2^e, 2^(e+1)) is split into
// subBuckets equal buckets of width 2^(e-subBits); every bucket's lower bound is
// at least subBuckets times its width.
const (
	subBits    = 7
	subBuckets = 1 << subBits // sub-buckets per power of two
	// exactLimit is the first value that does not have a bucket of its own.
	exactLimit = 2 * subBuckets
	// numBuckets covers every non-negative int64: exponents subBits+1 .. 62.
	numBuckets = exactLimit + (62-subBits)*subBuckets
)

// RelativeError is the bound on the relative error of a Quantile: the value
// returned lies within RelativeError times the exact nearest-rank value
// (1/256: each power of two has 128 buckets and a quantile is reported as its
// bucket's midpoint). Values below 256 ns are exact.
const RelativeError = 1.0 / (2 * subBuckets)

// A Histogram is a distribution of non-negative durations in log-linear
// buckets, from 1 ns to the largest time.Duration, with exact count, sum,
// minimum and maximum. Quantiles have a relative error of at most
// RelativeError (1/256).
//
// The zero value is an empty histogram ready to use. A Histogram is a plain
// value of about 57 KiB: copying it copies the distribution. It is not safe for
// concurrent use; see Recorder.
type Histogram struct {
	count int64
	sum   int64 // nanoseconds, exact
	min   int64 // nanoseconds, valid when count > 0
	max   int64
	// shift is the first recorded value; dev and dev2 are the sums of the
	// deviations from it and of their squares (the "shifted data" form of the
	// sum of squares, which keeps Std accurate when the spread is small next to
	// the mean).
	shift     int64
	dev, dev2 float64
	counts    [numBuckets]int64
}

// bucketOf returns the bucket index of v >= 0.
func bucketOf(v int64) int {
	if v < exactLimit {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1 // 2^e <= v < 2^(e+1), e > subBits
	s := e - subBits
	return exactLimit + (e-subBits-1)*subBuckets + int(v>>s) - subBuckets
}

// bucketBounds returns the lowest value of bucket i and the bucket's width.
func bucketBounds(i int) (lo, width int64) {
	if i < exactLimit {
		return int64(i), 1
	}
	j := i - exactLimit
	s := j/subBuckets + 1 // e - subBits
	sub := int64(j%subBuckets + subBuckets)
	return sub << s, 1 << s
}

// Record adds one value. A negative d is recorded as 0. Record does not
// allocate.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	if h.count == 0 {
		h.min, h.max, h.shift = v, v, v
	} else {
		h.min = min(h.min, v)
		h.max = max(h.max, v)
	}
	h.count++
	h.sum += v
	x := float64(v - h.shift)
	h.dev += x
	h.dev2 += x * x
	h.counts[bucketOf(v)]++
}

// Merge adds every value recorded in o to h, as if they had been recorded in
// h. o may be h itself; a nil o is ignored.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.count == 0 {
		return
	}
	if h.count == 0 {
		*h = *o
		return
	}
	// Re-centre o's deviations on h.shift: x-a = (x-b) + (b-a).
	n := float64(o.count)
	delta := float64(o.shift - h.shift)
	dev := o.dev + n*delta
	dev2 := o.dev2 + 2*delta*o.dev + n*delta*delta
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
	h.count += o.count
	h.sum += o.sum
	h.dev += dev
	h.dev2 += dev2
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count returns the number of recorded values.
func (h *Histogram) Count() int64 { return h.count }

// Sum returns the exact sum of the recorded values.
func (h *Histogram) Sum() time.Duration { return time.Duration(h.sum) }

// Mean returns the arithmetic mean (truncated to a nanosecond), or 0 when h is
// empty.
func (h *Histogram) Mean() time.Duration {
	if h.count == 0 {
		return 0
	}
	return time.Duration(h.sum / h.count)
}

// Std returns the population standard deviation (divided by Count, not
// Count-1), rounded to a nanosecond, or 0 when h is empty.
func (h *Histogram) Std() time.Duration {
	if h.count == 0 {
		return 0
	}
	n := float64(h.count)
	m := h.dev / n
	v := h.dev2/n - m*m
	if v <= 0 {
		return 0
	}
	return time.Duration(math.Round(math.Sqrt(v)))
}

// Min returns the smallest recorded value, or 0 when h is empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max returns the largest recorded value, or 0 when h is empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the q-quantile by nearest rank: an estimate of the value of
// rank ceil(q*Count) in ascending order, within RelativeError of it, clamped to
// [Min, Max]. Quantile(0) is exactly Min and Quantile(1) exactly Max; q outside
// [0, 1] is clamped to it (NaN counts as 0). An empty histogram returns 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	if !(q > 0) {
		return time.Duration(h.min)
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := int64(math.Ceil(q * float64(h.count)))
	rank = max(1, min(rank, h.count))
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, w := bucketBounds(i)
			v := lo + w/2
			return time.Duration(max(h.min, min(v, h.max)))
		}
	}
	return time.Duration(h.max) // not reached: the counts add up to count
}

// Summary is a histogram's figures at one moment.
type Summary struct {
	Count               int64
	Mean, Std, Min, Max time.Duration
	P50, P90, P99, P999 time.Duration
}

// Summary returns h's figures; the percentiles are Quantile(0.5), (0.9),
// (0.99) and (0.999).
func (h *Histogram) Summary() Summary {
	return Summary{
		Count: h.count,
		Mean:  h.Mean(),
		Std:   h.Std(),
		Min:   h.Min(),
		Max:   h.Max(),
		P50:   h.Quantile(0.5),
		P90:   h.Quantile(0.9),
		P99:   h.Quantile(0.99),
		P999:  h.Quantile(0.999),
	}
}

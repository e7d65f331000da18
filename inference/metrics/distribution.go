package metrics

import (
	"math"
	"slices"
	"time"
)

// A Distribution is a cumulative snapshot of durations in Histogram's
// log-linear buckets: how many were recorded, their exact sum, and how many
// fell in each bucket (values below 256 ns have a bucket each; above, a bucket
// spans at most 1/128 of its lower bound). Snapshots of one Recorder can be
// differenced (Sub) to get the distribution of an interval. The zero value is
// empty.
type Distribution struct {
	Count uint64        // values recorded
	Sum   time.Duration // their exact sum
	// counts[i] is the number of values in bucket i; the slice ends at the
	// last non-empty bucket. Never modified after newDistribution.
	counts []uint64
}

// newDistribution copies counts (trimmed after the last non-zero bucket).
func newDistribution(counts []uint64, sum time.Duration) Distribution {
	last := len(counts)
	for last > 0 && counts[last-1] == 0 {
		last--
	}
	d := Distribution{Sum: sum}
	if last > 0 {
		d.counts = slices.Clone(counts[:last])
	}
	for _, c := range d.counts {
		d.Count += c
	}
	return d
}

// Sub returns the distribution of the values recorded after earlier, a
// snapshot of the same Recorder taken before d. Counts that would be negative
// (snapshots in the wrong order or from different recorders) become 0.
func (d Distribution) Sub(earlier Distribution) Distribution {
	counts := slices.Clone(d.counts)
	for i, c := range earlier.counts {
		if i < len(counts) {
			counts[i] = subCount(counts[i], c)
		}
	}
	return newDistribution(counts, d.Sum-earlier.Sum)
}

// Mean returns Sum/Count (truncated to a nanosecond), or 0 when d is empty.
func (d Distribution) Mean() time.Duration {
	if d.Count == 0 {
		return 0
	}
	return d.Sum / time.Duration(d.Count)
}

// Quantile returns the q-quantile by nearest rank: the midpoint of the bucket
// holding the value of rank ceil(q*Count) in ascending order, within
// RelativeError of that value (exact below 256 ns). q is clamped to [0, 1]
// (NaN counts as 0); q = 0 gives the smallest value's bucket, q = 1 the
// largest's. An empty distribution returns 0.
func (d Distribution) Quantile(q float64) time.Duration {
	if d.Count == 0 {
		return 0
	}
	rank := uint64(1)
	if q > 0 {
		rank = uint64(math.Ceil(min(q, 1) * float64(d.Count)))
		rank = max(1, min(rank, d.Count))
	}
	var seen uint64
	for i, c := range d.counts {
		seen += c
		if seen >= rank {
			lo, w := bucketBounds(i)
			return time.Duration(lo + w/2)
		}
	}
	return 0 // not reached: the counts add up to Count
}

// CountAtOrBelow returns how many values lie in buckets whose every value is
// at most x: the number of values <= x' for the largest bucket edge x' <= x
// (so x' = x for x below 256 ns, and x' > x*(1-1/128) above). It is the
// cumulative count of a Prometheus-style histogram bucket with upper bound
// x, exact when x is the top of a bucket and never counting a value above x.
func (d Distribution) CountAtOrBelow(x time.Duration) uint64 {
	if x < 0 {
		return 0
	}
	b := bucketOf(int64(x))
	if lo, w := bucketBounds(b); int64(x) == lo+w-1 {
		b++ // x is the top of its bucket: the whole bucket is at or below x
	}
	var n uint64
	for _, c := range d.counts[:min(b, len(d.counts))] {
		n += c
	}
	return n
}

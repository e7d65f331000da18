package metrics

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"
)

// FuzzHistogram checks, for arbitrary values, that every quantile is within
// RelativeError of the exact nearest-rank value, that Min, Max and Count are
// exact, and that recording two halves and merging equals recording all.
func FuzzHistogram(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0}, uint8(0))
	f.Add(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 255), 257), uint8(1))
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<62+12345), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		var vs []time.Duration
		for len(data) >= 8 {
			v := int64(binary.LittleEndian.Uint64(data) >> 1) // non-negative
			vs = append(vs, time.Duration(v>>(data[0]%64)))   // spread over all magnitudes
			data = data[8:]
		}
		if len(vs) == 0 {
			return
		}
		cut := int(split) % (len(vs) + 1)
		var all, a, b Histogram
		for i, v := range vs {
			all.Record(v)
			if i < cut {
				a.Record(v)
			} else {
				b.Record(v)
			}
		}
		a.Merge(&b)
		if a.counts != all.counts || a.Count() != all.Count() || a.Min() != all.Min() || a.Max() != all.Max() {
			t.Fatalf("Merge of halves differs from recording all")
		}
		sorted := slices.Sorted(slices.Values(vs))
		if all.Min() != sorted[0] || all.Max() != sorted[len(sorted)-1] || all.Count() != int64(len(vs)) {
			t.Fatalf("Min, Max, Count = %v, %v, %d, want %v, %v, %d",
				all.Min(), all.Max(), all.Count(), sorted[0], sorted[len(sorted)-1], len(vs))
		}
		for _, q := range quantiles {
			want := exactQuantile(sorted, q)
			got := all.Quantile(q)
			diff := float64(got - want)
			if diff < 0 {
				diff = -diff
			}
			if diff > float64(want)*RelativeError {
				t.Fatalf("Quantile(%v) = %d, want %d within %v", q, got, want, RelativeError)
			}
		}
	})
}

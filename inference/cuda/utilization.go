package cuda

import (
	"fmt"
	"slices"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
)

// union is the length of the union of spans ([start, end] pairs, in any order)
// clipped to [0, limit]. It sorts spans.
func union(spans [][2]float64, limit float64) float64 {
	slices.SortFunc(spans, func(a, b [2]float64) int {
		switch {
		case a[0] < b[0]:
			return -1
		case a[0] > b[0]:
			return 1
		}
		return 0
	})
	var sum, end float64
	for _, sp := range spans {
		lo, hi := max(sp[0], end, 0), min(sp[1], limit)
		if hi > lo {
			sum += hi - lo
		}
		end = max(end, hi)
	}
	return sum
}

// nvmlPercent fills u.Kind (GPUUtilization), u.Percent and u.Samples from an
// NVML sampler's Stop (mean over samples device readings), or leaves Kind
// NoUtilization and sets u.PercentErr when nothing was measured:
// NVML could not be opened (unavailable, its error), or no sample fell inside
// an interval shorter than the sampling period.
func nvmlPercent(u *backend.Utilization, unavailable error, mean float64, samples int, period time.Duration) {
	switch {
	case unavailable != nil:
		u.PercentErr = fmt.Errorf("cuda: GPU utilisation not measured: NVML unavailable: %w", unavailable)
	case samples == 0:
		u.PercentErr = fmt.Errorf("cuda: GPU utilisation not measured: no NVML sample in the interval (one every %v)", period)
	default:
		u.Kind, u.Percent, u.Samples = backend.GPUUtilization, mean, samples
	}
}

package cuda

import "slices"

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

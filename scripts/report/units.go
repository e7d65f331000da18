package main

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// scale says how to print the values of one unit: divide by factor and
// label the column with label (e.g. factor 1e-3 and "p50 latency (ms)").
type scale struct {
	label  string
	factor float64
}

// titles gives readable names to the units our suites report (tidied, as
// benchfmt returns them: ns becomes sec).
var titles = map[string]string{
	"sec/op":           "time/op",
	"samples/s":        "samples/s",
	"req/s":            "req/s",
	"mean-latency-sec": "mean latency",
	"std-latency-sec":  "latency std dev",
	"min-latency-sec":  "min latency",
	"max-latency-sec":  "max latency",
	"p50-latency-sec":  "p50 latency",
	"p90-latency-sec":  "p90 latency",
	"p99-latency-sec":  "p99 latency",
	"p999-latency-sec": "p99.9 latency",
	"warmup-sec":       "warm-up",
	"load-sec":         "checkpoint load",
	"setup-sec":        "back-end setup",
	"first-sec":        "first inference",
	"queue-sec":        "queue",
	"h2d-sec":          "copy in (H2D)",
	"compute-sec":      "compute",
	"d2h-sec":          "copy out (D2H)",
	"gpu-util-pct":     "GPU util %",
	"gpu-busy-pct":     "GPU busy %",
	"cpu-util-pct":     "CPU util %",
	"late-pct":         "late %",
}

// unitOrder is the order of units in the per-configuration tables; units
// not listed follow in the order the files give them.
var unitOrder = []string{
	"samples/s", "req/s", "sec/op",
	"mean-latency-sec", "std-latency-sec", "min-latency-sec", "p50-latency-sec", "p90-latency-sec",
	"p99-latency-sec", "p999-latency-sec", "max-latency-sec",
	"queue-sec", "h2d-sec", "compute-sec", "d2h-sec",
	"warmup-sec", "load-sec", "setup-sec", "first-sec",
	"gpu-util-pct", "gpu-busy-pct", "cpu-util-pct", "late-pct",
}

// sortUnits orders units by unitOrder, keeping the others' order.
func sortUnits(units []string) {
	rank := func(u string) int {
		if i := slices.Index(unitOrder, u); i >= 0 {
			return i
		}
		return len(unitOrder)
	}
	slices.SortStableFunc(units, func(a, b string) int { return rank(a) - rank(b) })
}

// isTime reports whether a tidied unit measures seconds.
func isTime(unit string) bool {
	return unit == "sec/op" || strings.HasSuffix(unit, "-sec")
}

// scaleFor picks a readable scale for values in a tidied unit: time units
// get s, ms, µs or ns by the largest value; other units are printed as is.
func scaleFor(unit string, values ...float64) scale {
	title, ok := titles[unit]
	if !ok {
		title = unit
	}
	if !isTime(unit) {
		return scale{label: title, factor: 1}
	}
	big := 0.0
	for _, v := range values {
		big = math.Max(big, math.Abs(v))
	}
	prefix, factor := "ns", 1e-9
	switch {
	case big >= 1:
		prefix, factor = "s", 1
	case big >= 1e-3:
		prefix, factor = "ms", 1e-3
	case big >= 1e-6:
		prefix, factor = "µs", 1e-6
	}
	return scale{label: title + " (" + prefix + ")", factor: factor}
}

// format prints v in this scale with about four significant digits.
func (s scale) format(v float64) string {
	return formatNum(v / s.factor)
}

// formatNum prints v with about four significant digits and no exponent.
func formatNum(v float64) string {
	a := math.Abs(v)
	prec := 0
	switch {
	case a == 0 || a >= 1000:
		prec = 0
	case a >= 100:
		prec = 1
	case a >= 10:
		prec = 2
	case a >= 1:
		prec = 3
	default:
		prec = 4
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

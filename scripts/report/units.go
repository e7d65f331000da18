package main

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchunit"
)

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

// title returns a readable name for a tidied unit.
func title(unit string) string {
	if t, ok := titles[unit]; ok {
		return t
	}
	return unit
}

// format prints v, in a tidied unit, as benchstat does: with
// golang.org/x/perf/benchunit's SI prefix and at least three significant
// digits, and "s" after the prefix of a time ("21.30ms", "40.12k", "97.20").
// A fraction of a unit that is not a time gets no prefix ("0.793", not
// "792.8m", which reads as a unit of its own).
func format(unit string, v float64) string {
	if isTime(unit) {
		return benchunit.Scale(v, benchunit.Decimal) + "s"
	}
	if a := math.Abs(v); a > 0 && a < 1 {
		prec := 2 - int(math.Floor(math.Log10(a)))
		return strconv.FormatFloat(v, 'f', prec, 64)
	}
	return benchunit.Scale(v, benchunit.ClassOf(unit))
}

// axisUnit returns the factor to divide the values of a tidied time unit by
// for an axis whose largest value is big, and the unit's name on that axis
// (benchunit's prefix for big and "s": "ms"). Other units are plotted as
// they are (their ticks carry k and M): factor 1 and an empty name.
func axisUnit(unit string, big float64) (factor float64, name string) {
	if !isTime(unit) {
		return 1, ""
	}
	sc := benchunit.CommonScale([]float64{big}, benchunit.Decimal)
	return sc.Factor, sc.Prefix + "s"
}

package main

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// ErrRegression is wrapped by the error run returns when the gate fails.
var ErrRegression = errors.New("gate: regression")

// groupKey identifies the measurements of one benchmark in one tidied unit.
type groupKey struct {
	name string // full benchmark name, e.g. Server/backend=cpu/batch=1/...
	unit string // tidied unit, e.g. sec/op or p50-latency-sec
}

// sample is what one file holds: measurements grouped by benchmark and unit,
// in the order they first appear, and the file's unit metadata.
type sample struct {
	path   string
	values map[groupKey][]float64
	order  []groupKey
	units  benchfmt.UnitMetadataMap
	// config holds, per benchmark, the distinct values of each config line
	// its results were measured under (lines in cfg.ignore left out).
	config map[string]map[string][]string
}

// readFile reads one benchmark file, keeping the results and units cfg asks
// for.
func readFile(path string, cfg *config) (*sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	defer f.Close()
	s := &sample{path: path, values: map[groupKey][]float64{}, config: map[string]map[string][]string{}}
	r := benchfmt.NewReader(f, path)
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.SyntaxError:
			// Non-benchmark lines (test output, PASS, ok ...) are not
			// syntax errors; anything reported here is a malformed line.
			return nil, fmt.Errorf("gate: %w", rec)
		case *benchfmt.Result:
			ok, err := cfg.filter.Apply(rec)
			if err != nil {
				return nil, fmt.Errorf("gate: filter: %w", err)
			}
			if !ok {
				continue
			}
			name := string(rec.Name.Full())
			s.noteConfig(name, rec, cfg.ignore)
			for _, v := range withCPUCost(rec.Values, cfg.cores) {
				if cfg.units != nil && !cfg.units[v.Unit] {
					continue
				}
				k := groupKey{name, v.Unit}
				if _, seen := s.values[k]; !seen {
					s.order = append(s.order, k)
				}
				s.values[k] = append(s.values[k], v.Value)
			}
		}
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("gate: reading %s: %w", path, err)
	}
	s.units = r.Units()
	return s, nil
}

// cpuCostUnit is the CPU time a benchmark used per operation, derived from
// the suite's cpu-util-pct (the process's CPU time over wall time x cores)
// and sec/op (wall time per operation). Unlike wall time it barely moves
// when other processes take the cores: it is the primary figure of a
// CPU-bound benchmark on a shared machine.
const cpuCostUnit = "cpu-sec/op"

// withCPUCost returns vals with a cpuCostUnit value appended when vals have
// cpu-util-pct and sec/op but no cpuCostUnit of their own. cores is the
// number of cores cpu-util-pct is a share of.
func withCPUCost(vals []benchfmt.Value, cores int) []benchfmt.Value {
	util, secOp := math.NaN(), math.NaN()
	for _, v := range vals {
		switch v.Unit {
		case cpuCostUnit:
			return vals
		case "cpu-util-pct":
			util = v.Value
		case "sec/op":
			secOp = v.Value
		}
	}
	if math.IsNaN(util) || math.IsNaN(secOp) || cores <= 0 {
		return vals
	}
	return append(slices.Clip(vals), benchfmt.Value{Value: util / 100 * float64(cores) * secOp, Unit: cpuCostUnit})
}

// status is the outcome of one comparison.
type status int

const (
	unchanged  status = iota // no significant change
	improved                 // significant change in the better direction
	tolerated                // significantly worse, but within the threshold
	underFloor               // significantly worse beyond the threshold, but by less than the threshold's share of the noise floor
	regressed                // significantly worse beyond the threshold: fails
	ungated                  // threshold is off for this unit
	secondary                // shown, but not the benchmark's primary figure
	onlyBase                 // benchmark/unit missing from head
	onlyHead                 // new in head
)

func (s status) String() string {
	return [...]string{"~", "improved", "worse, within threshold", "worse, under noise floor", "REGRESSION", "not gated", "secondary", "missing in head", "new"}[s]
}

// verdict is the comparison of one benchmark in one unit.
type verdict struct {
	key        groupKey
	better     int     // +1 higher is better, -1 lower is better
	base, head float64 // medians (or the file's assumption's centre)
	baseCI     float64 // half-width of base's 95 % CI relative to its centre
	headCI     float64
	delta      float64 // (head-base)/base
	cmp        benchmath.Comparison
	holmP      float64 // cmp.P adjusted for the gated comparisons by Holm-Bonferroni
	threshold  float64 // relative; negative means off
	floor      float64 // noise floor in the unit (seconds for time units), 0 for none
	secondary  bool    // not the benchmark's primary figure: shown, never gated
	status     status
}

// gated reports whether v is one of the comparisons that can fail the gate:
// both files have it, it is a gated figure and its threshold is on.
func (v *verdict) gated() bool {
	return v.status != onlyBase && v.status != onlyHead && !v.secondary && v.threshold >= 0
}

// throughputUnits are the throughput units in order of preference: by
// default a benchmark is gated on the first it reports (samples/s and req/s
// and sec/op of one benchmark are the same measurement, rescaled).
var throughputUnits = []string{"samples/s", "req/s", "sec/op"}

// latencyUnits are the latency percentiles gated by default. p99.9 is left
// out: with a burst of 100 requests it is the maximum.
var latencyUnits = []string{"p50-latency-sec", "p90-latency-sec", "p99-latency-sec"}

// defaultPrimary is the default -primary list: the units a benchmark is
// gated on, in order of preference, when -units is not given.
var defaultPrimary = []string{cpuCostUnit, "p50-latency-sec", "samples/s", "req/s", "sec/op"}

// defaultUnits returns the units the gate compares for a benchmark that
// reports units when -units is not given: the CPU cost per operation, one
// throughput unit and the latency percentiles.
func defaultUnits(units []string) []string {
	var out []string
	if slices.Contains(units, cpuCostUnit) {
		out = append(out, cpuCostUnit)
	}
	for _, u := range throughputUnits {
		if slices.Contains(units, u) {
			out = append(out, u)
			break
		}
	}
	for _, u := range latencyUnits {
		if slices.Contains(units, u) {
			out = append(out, u)
		}
	}
	return out
}

// primaryUnit returns the first unit of prefs that units holds, or "".
func primaryUnit(units, prefs []string) string {
	for _, p := range prefs {
		if slices.Contains(units, p) {
			return p
		}
	}
	return ""
}

// compare compares every benchmark of base with head in the units cfg
// selects, and judges each comparison after correcting the p-values of the
// gated ones for their number (Holm-Bonferroni). Without -units a benchmark
// is gated on its primary unit alone (the first of cfg.primary it reports);
// its other default units are compared and shown as secondary.
func compare(base, head *sample, cfg *config) ([]verdict, error) {
	units := benchfmt.UnitMetadataMap{}
	for k, v := range base.units {
		units[k] = v
	}
	for k, v := range head.units {
		units[k] = v
	}
	thr := &benchmath.Thresholds{CompareAlpha: cfg.alpha}
	var out []verdict
	var few []string
	keys := append([]groupKey(nil), base.order...)
	for _, k := range head.order {
		if _, ok := base.values[k]; !ok {
			keys = append(keys, k)
		}
	}
	unitsOf := map[string][]string{} // units of either file
	inBoth := map[string][]string{}  // units of both files: primary candidates
	for _, k := range keys {
		unitsOf[k.name] = append(unitsOf[k.name], k.unit)
		_, inBase := base.values[k]
		if _, inHead := head.values[k]; inBase && inHead {
			inBoth[k.name] = append(inBoth[k.name], k.unit)
		}
	}
	for _, k := range keys {
		if cfg.units == nil && !cfg.allUnits && !slices.Contains(defaultUnits(unitsOf[k.name]), k.unit) {
			continue
		}
		v := verdict{key: k, better: units.GetBetter(k.unit), threshold: cfg.thresholds.of(k.unit)}
		if cfg.units == nil && !cfg.allUnits {
			v.secondary = k.unit != primaryUnit(inBoth[k.name], cfg.primary)
		}
		if isTime(k.unit) {
			v.floor = cfg.floor.Seconds()
		}
		if v.better == 0 {
			v.better = -1
		}
		bv, inBase := base.values[k]
		hv, inHead := head.values[k]
		switch {
		case !inHead:
			v.status = onlyBase
			out = append(out, v)
			continue
		case !inBase:
			v.status = onlyHead
			out = append(out, v)
			continue
		}
		if len(bv) < cfg.minRuns || len(hv) < cfg.minRuns {
			msg := fmt.Sprintf("%s: %d base, %d head", k.name, len(bv), len(hv))
			if len(few) == 0 || few[len(few)-1] != msg {
				few = append(few, msg)
			}
			continue
		}
		assume := units.GetAssumption(k.unit)
		bs, hs := benchmath.NewSample(bv, thr), benchmath.NewSample(hv, thr)
		bsum, hsum := assume.Summary(bs, 0.95), assume.Summary(hs, 0.95)
		v.base, v.head = bsum.Center, hsum.Center
		v.baseCI, v.headCI = relHalfWidth(bsum), relHalfWidth(hsum)
		v.cmp = assume.Compare(bs, hs)
		v.delta = relChange(v.base, v.head)
		out = append(out, v)
	}
	if len(few) > 0 {
		return nil, fmt.Errorf("gate: need at least %d runs per side (run with -count %d or more); too few for:\n  %s",
			cfg.minRuns, cfg.minRuns, strings.Join(few, "\n  "))
	}
	if err := holm(out, cfg.alpha); err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].status != onlyBase && out[i].status != onlyHead {
			out[i].status = judge(out[i])
		}
	}
	return out, nil
}

// holm sets holmP of the gated verdicts: their p-values adjusted by the
// Holm-Bonferroni step-down method, so that the chance that any of them is
// significant when nothing changed stays at most alpha, however many there
// are and however they depend on each other. With m comparisons sorted by p,
// the i-th (from 0) gets max over j <= i of min(1, (m-j) p_j).
//
// It returns an error when no gated comparison can reach alpha/m, the bar of
// the first step: with too few runs for so many comparisons the gate could
// never fail.
func holm(vs []verdict, alpha float64) error {
	var idx []int
	for i := range vs {
		if vs[i].gated() {
			idx = append(idx, i)
		}
	}
	m := len(idx)
	if m == 0 {
		return nil
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(vs[a].cmp.P, vs[b].cmp.P) })
	running := 0.0
	for j, i := range idx {
		running = max(running, min(1, float64(m-j)*vs[i].cmp.P))
		vs[i].holmP = running
	}
	best := math.Inf(1)
	var runs int
	for _, i := range idx {
		if p := minP(vs[i]); p < best {
			best, runs = p, min(vs[i].cmp.N1, vs[i].cmp.N2)
		}
	}
	if best >= alpha/float64(m) {
		need := runs
		for minUTestP(need, need) >= alpha/float64(m) {
			need++
		}
		return fmt.Errorf("gate: %d comparisons: Holm-Bonferroni needs p < %.2g (alpha/%d) for the first, but %d runs per side give at best p = %.2g; run at least %d per side, or gate fewer benchmarks or units (-filter, -units)",
			m, alpha/float64(m), m, runs, best, need)
	}
	return nil
}

// minP returns the smallest p-value v's test can give with its sample
// sizes: 0 for an exact comparison (any difference is significant).
func minP(v verdict) float64 {
	if v.cmp.P == 0 {
		return 0
	}
	return minUTestP(v.cmp.N1, v.cmp.N2)
}

// minUTestP returns the smallest two-sided p-value of the Mann-Whitney U test
// with samples of n1 and n2 values without ties: both samples entirely apart,
// 2 of the C(n1+n2, n1) equally likely orderings.
func minUTestP(n1, n2 int) float64 {
	c := 1.0
	for i := 1; i <= n1; i++ {
		c = c * float64(n2+i) / float64(i)
	}
	return min(1, 2/c)
}

// judge decides the status of a compared verdict: significant means its
// Holm-adjusted p-value is below alpha. A time figure below the noise floor
// is judged against the floor: it regresses only if its change exceeds the
// threshold's share of the floor.
func judge(v verdict) status {
	significant := v.holmP < v.cmp.Alpha
	switch {
	case v.secondary:
		return secondary
	case v.threshold < 0:
		return ungated
	case !significant || v.delta == 0:
		return unchanged
	case float64(v.better)*v.delta > 0:
		return improved
	case math.Abs(v.delta) <= v.threshold:
		return tolerated
	case v.floor > 0 && math.Abs(v.head-v.base) <= v.threshold*v.floor:
		return underFloor
	default:
		return regressed
	}
}

// isTime reports whether a tidied unit measures seconds.
func isTime(unit string) bool {
	return unit == "sec/op" || strings.HasSuffix(unit, "-sec")
}

// relChange returns (head-base)/base; equal values give 0 and a zero base
// gives ±Inf.
func relChange(base, head float64) float64 {
	if base == head {
		return 0
	}
	if base == 0 {
		return math.Copysign(math.Inf(1), head)
	}
	return (head - base) / math.Abs(base)
}

// relHalfWidth returns the larger distance from the centre to a bound of the
// confidence interval, relative to the centre.
func relHalfWidth(s benchmath.Summary) float64 {
	if s.Center == 0 {
		return 0
	}
	return math.Max(s.Center-s.Lo, s.Hi-s.Center) / math.Abs(s.Center)
}

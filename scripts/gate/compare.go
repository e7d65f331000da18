package main

import (
	"errors"
	"fmt"
	"math"
	"os"
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
			for _, v := range rec.Values {
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

// status is the outcome of one comparison.
type status int

const (
	unchanged status = iota // no significant change
	improved                // significant change in the better direction
	tolerated               // significantly worse, but within the threshold
	regressed               // significantly worse beyond the threshold: fails
	ungated                 // threshold is off for this unit
	onlyBase                // benchmark/unit missing from head
	onlyHead                // new in head
)

func (s status) String() string {
	return [...]string{"~", "improved", "worse, within threshold", "REGRESSION", "not gated", "missing in head", "new"}[s]
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
	threshold  float64 // relative; negative means off
	status     status
}

// compare compares every benchmark and unit of base with head.
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
	for _, k := range keys {
		v := verdict{key: k, better: units.GetBetter(k.unit), threshold: cfg.thresholds.of(k.unit)}
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
		v.status = judge(v)
		out = append(out, v)
	}
	if len(few) > 0 {
		return nil, fmt.Errorf("gate: need at least %d runs per side (run with -count %d or more); too few for:\n  %s",
			cfg.minRuns, cfg.minRuns, strings.Join(few, "\n  "))
	}
	return out, nil
}

// judge decides the status of a compared verdict.
func judge(v verdict) status {
	significant := v.cmp.P < v.cmp.Alpha
	switch {
	case v.threshold < 0:
		return ungated
	case !significant || v.delta == 0:
		return unchanged
	case float64(v.better)*v.delta > 0:
		return improved
	case math.Abs(v.delta) > v.threshold:
		return regressed
	default:
		return tolerated
	}
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

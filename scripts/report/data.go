package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
	"golang.org/x/perf/benchproc"
)

// group holds every measurement of one configuration (one full benchmark
// name) across runs and files.
type group struct {
	name   string               // full name without the Benchmark prefix
	base   string               // base name, e.g. Server
	keys   []kv                 // sub-benchmark keys in name order
	values map[string][]float64 // tidied unit -> one value per run
	units  []string             // tidied units in first-seen order
	series benchproc.Key        // projection on every key but batch
	batch  int                  // batch size, or 0 if the name has none
}

// kv is one key=value part of a sub-benchmark name.
type kv struct{ key, value string }

// dataset is everything read from the input files.
type dataset struct {
	groups []*group
	units  benchfmt.UnitMetadataMap
	config []kv // file configuration (gpu, driver, commit...), values joined
}

// read reads and groups the results of the files that match filter.
func read(paths []string, filter *benchproc.Filter) (*dataset, error) {
	var parser benchproc.ProjectionParser
	seriesBy, err := parser.Parse("/"+strings.Join(seriesKeyNames, ",/"), filter)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	batchBy, err := parser.Parse("/batch", filter)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	batchField := batchBy.Fields()[0]

	ds := &dataset{}
	byName := map[string]*group{}
	configSeen := map[string][]string{}
	var configOrder []string
	files := benchfmt.Files{Paths: paths, AllowStdin: true}
	for files.Scan() {
		switch rec := files.Result().(type) {
		case *benchfmt.SyntaxError:
			return nil, fmt.Errorf("report: %w", rec)
		case *benchfmt.Result:
			ok, err := filter.Apply(rec)
			if err != nil {
				return nil, fmt.Errorf("report: filter: %w", err)
			}
			if !ok {
				continue
			}
			for _, c := range rec.Config {
				if !c.File {
					continue
				}
				k, v := c.Key, string(c.Value)
				if _, seen := configSeen[k]; !seen {
					configOrder = append(configOrder, k)
				}
				if !slices.Contains(configSeen[k], v) {
					configSeen[k] = append(configSeen[k], v)
				}
			}
			name := string(rec.Name.Full())
			g := byName[name]
			if g == nil {
				g = &group{name: name, base: string(rec.Name.Base()), keys: parseKeys(rec.Name), values: map[string][]float64{}}
				g.series = seriesBy.Project(rec)
				g.batch, _ = strconv.Atoi(batchBy.Project(rec).Get(batchField))
				byName[name] = g
				ds.groups = append(ds.groups, g)
			}
			for _, v := range rec.Values {
				if _, seen := g.values[v.Unit]; !seen {
					g.units = append(g.units, v.Unit)
				}
				g.values[v.Unit] = append(g.values[v.Unit], v.Value)
			}
		}
	}
	if err := files.Err(); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	for _, g := range ds.groups {
		sortUnits(g.units)
	}
	ds.units = files.Units()
	for _, k := range configOrder {
		ds.config = append(ds.config, kv{k, strings.Join(configSeen[k], ", ")})
	}
	return ds, nil
}

// parseKeys returns the key=value parts of a benchmark name (benchfmt's
// Name.Parts: "/backend=cpu", a positional "/x", a "-8" GOMAXPROCS suffix).
// A positional part gets an empty key and the suffix the key "gomaxprocs".
func parseKeys(name benchfmt.Name) []kv {
	_, parts := name.Parts()
	var out []kv
	for _, p := range parts {
		s := string(p)
		if rest, ok := strings.CutPrefix(s, "-"); ok {
			out = append(out, kv{"gomaxprocs", rest})
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(s, "/"), "=")
		if !ok {
			k, v = "", k
		}
		out = append(out, kv{k, v})
	}
	return out
}

// get returns the value of a sub-benchmark key, or "".
func (g *group) get(key string) string {
	for _, p := range g.keys {
		if p.key == key {
			return p.value
		}
	}
	return ""
}

// stats summarises one configuration's runs in one unit.
type stats struct {
	n              int
	mean, std      float64 // sample mean and standard deviation
	median, lo, hi float64 // median and its 95 % confidence interval
	ciConfidence   float64 // actual confidence of [lo, hi]
	ciOK           bool    // false when there are too few runs for the CI
}

// summarize computes the statistics of a set of runs.
func summarize(values []float64) stats {
	s := stats{n: len(values)}
	if s.n == 0 {
		return s
	}
	for _, v := range values {
		s.mean += v
	}
	s.mean /= float64(s.n)
	if s.n > 1 {
		var ss float64
		for _, v := range values {
			ss += (v - s.mean) * (v - s.mean)
		}
		s.std = math.Sqrt(ss / float64(s.n-1))
	}
	// NewSample sorts its argument; keep the caller's order.
	sorted := slices.Clone(values)
	sum := benchmath.AssumeNothing.Summary(benchmath.NewSample(sorted, &benchmath.DefaultThresholds), 0.95)
	s.median, s.lo, s.hi, s.ciConfidence = sum.Center, sum.Lo, sum.Hi, sum.Confidence
	// With fewer than 6 runs a 95 % interval of the median does not exist
	// and benchmath returns ±Inf bounds.
	s.ciOK = !math.IsInf(s.lo, 0) && !math.IsInf(s.hi, 0)
	if !s.ciOK {
		s.lo, s.hi = math.NaN(), math.NaN()
	}
	return s
}

// stat returns the statistics of a group's measured values in a tidied unit
// and whether there are any.
func (g *group) stat(unit string) (stats, bool) {
	v := measured(g, unit)
	if len(v) == 0 {
		return stats{}, false
	}
	return summarize(v), true
}

// measured returns the values of unit that g's runs measured. Files written
// before the suite reported gpu-util-samples print gpu-util-pct 0 for a run
// in which NVML took no sample (a run shorter than its 100 ms period): in
// such files a zero GPU utilisation is left out as not measured.
func measured(g *group, unit string) []float64 {
	v := g.values[unit]
	if _, counted := g.values["gpu-util-samples"]; unit != "gpu-util-pct" || counted {
		return v
	}
	return slices.DeleteFunc(slices.Clone(v), func(x float64) bool { return x == 0 })
}

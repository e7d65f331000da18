package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/perf/benchmath"
	"golang.org/x/perf/benchproc"
	"golang.org/x/perf/benchunit"
)

// config holds the parsed command line.
type config struct {
	base, head string
	alpha      float64 // significance level of the Mann-Whitney U test
	minRuns    int     // fewest measurements per side and group
	thresholds *thresholds
	units      map[string]bool // tidied units to gate on; nil means the defaults (see defaultUnits)
	allUnits   bool            // -units all: every unit
	primary    []string        // tidied units, in order of preference, a benchmark is gated on without -units
	cores      int             // cores cpu-util-pct is a share of, for cpu-sec/op
	floor      time.Duration   // noise floor of time figures
	filter     *benchproc.Filter
	changes    bool            // print only rows with a significant change
	ignore     map[string]bool // config lines not compared between the files
}

// thresholds maps tidied units to the relative change (0.05 = 5 %) beyond
// which a significant change in the worse direction fails the gate. A
// negative value switches the gate off for that unit. It implements
// flag.Value: "-threshold 5%" sets the default, "-threshold
// p99-latency-ns=10%" or "-threshold cpu-util-pct=off" set one unit.
type thresholds struct {
	def     float64
	perUnit map[string]float64
}

func (t *thresholds) String() string {
	if t == nil {
		return ""
	}
	parts := []string{formatPct(t.def)}
	keys := make([]string, 0, len(t.perUnit))
	for k := range t.perUnit {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+formatPct(t.perUnit[k]))
	}
	return strings.Join(parts, ",")
}

func (t *thresholds) Set(s string) error {
	for _, item := range strings.Split(s, ",") {
		unit, val, hasUnit := strings.Cut(item, "=")
		if !hasUnit {
			val, unit = unit, ""
		}
		v, err := parsePct(val)
		if err != nil {
			return err
		}
		if unit == "" {
			t.def = v
			continue
		}
		_, tidy := benchunit.Tidy(1, unit)
		t.perUnit[tidy] = v
	}
	return nil
}

// of returns the threshold for a tidied unit.
func (t *thresholds) of(unit string) float64 {
	if v, ok := t.perUnit[unit]; ok {
		return v
	}
	return t.def
}

// parsePct parses a percentage such as "5%" or "5" into 0.05; "off" gives -1,
// which disables the gate for a unit.
func parsePct(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "off" {
		return -1, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("gate: bad threshold %q: want a percentage such as 5%% or off", s)
	}
	return v / 100, nil
}

func formatPct(v float64) string {
	if v < 0 {
		return "off"
	}
	return strconv.FormatFloat(v*100, 'g', -1, 64) + "%"
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{thresholds: &thresholds{def: 0.05, perUnit: map[string]float64{}}}
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: gate [flags] base.txt head.txt\n\n"+
			"Fails (exit 1) when a benchmark got significantly worse than a threshold.\n\n")
		fs.PrintDefaults()
	}
	fs.Float64Var(&cfg.alpha, "alpha", benchmath.DefaultThresholds.CompareAlpha, "a change is significant if its Mann-Whitney U p-value, adjusted for the number of comparisons (Holm-Bonferroni), is below `α`")
	fs.IntVar(&cfg.minRuns, "min-runs", 6, "fewest runs per side and benchmark (`n`); fewer is an error")
	fs.Var(cfg.thresholds, "threshold", "fail on a significant change worse than `pct`; repeatable: 5%, p99-latency-ns=10%, cpu-util-pct=off")
	units := fs.String("units", "", "comma-separated `units` to gate on, e.g. sec/op,samples/s, or all (default: per benchmark one throughput unit, samples/s, req/s or sec/op, and p50, p90 and p99 latency)")
	primary := fs.String("primary", strings.Join(defaultPrimary, ","), "without -units, gate each benchmark on the first of these comma-separated `units` it reports in both files; its other units are shown, not gated")
	fs.IntVar(&cfg.cores, "cores", runtime.NumCPU(), "`n` cores that the suite's cpu-util-pct is a share of (the measuring machine's; it scales "+cpuCostUnit+", not its relative change); 0: no "+cpuCostUnit)
	fs.DurationVar(&cfg.floor, "floor", time.Microsecond, "noise floor of time figures: one below `duration` is judged against it, so it must change by more than the threshold's share of the floor to regress (0: none)")
	filter := fs.String("filter", "*", "gate only benchmarks matching benchproc filter `query`, e.g. '/backend:cpu'")
	fs.BoolVar(&cfg.changes, "changes", false, "print only rows with a significant change or no comparison")
	ignore := fs.String("ignore", "", "comma-separated config line `keys` not to compare between the files, besides "+strings.Join(alwaysIgnored, ", "))
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return nil, errors.New("gate: need exactly two files: base and head")
	}
	cfg.base, cfg.head = fs.Arg(0), fs.Arg(1)
	if cfg.alpha <= 0 || cfg.alpha >= 1 {
		return nil, fmt.Errorf("gate: -alpha %g out of (0, 1)", cfg.alpha)
	}
	if cfg.minRuns < 2 {
		return nil, fmt.Errorf("gate: -min-runs %d: need at least 2", cfg.minRuns)
	}
	if cfg.floor < 0 {
		return nil, fmt.Errorf("gate: -floor %v: must not be negative", cfg.floor)
	}
	if cfg.cores < 0 {
		return nil, fmt.Errorf("gate: -cores %d: must not be negative", cfg.cores)
	}
	for _, u := range strings.Split(*primary, ",") {
		if u = strings.TrimSpace(u); u != "" {
			_, tidy := benchunit.Tidy(1, u)
			cfg.primary = append(cfg.primary, tidy)
		}
	}
	if len(cfg.primary) == 0 {
		return nil, errors.New("gate: -primary: need at least one unit")
	}
	if *units == "all" {
		cfg.allUnits = true
	} else if *units != "" {
		cfg.units = map[string]bool{}
		for _, u := range strings.Split(*units, ",") {
			_, tidy := benchunit.Tidy(1, strings.TrimSpace(u))
			cfg.units[tidy] = true
		}
	}
	cfg.ignore = map[string]bool{}
	for _, k := range append(slices.Clone(alwaysIgnored), strings.Split(*ignore, ",")...) {
		if k = strings.TrimSpace(k); k != "" {
			cfg.ignore[k] = true
		}
	}
	f, err := benchproc.NewFilter(*filter)
	if err != nil {
		return nil, fmt.Errorf("gate: -filter: %w", err)
	}
	cfg.filter = f
	return cfg, nil
}

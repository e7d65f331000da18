package suite

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"
)

// runB is what a measured run needs of the benchmark that calls it: the
// methods of *testing.B it uses and b.N, so that go test (testingB) and the
// bench command (cmdB) run the same code.
type runB interface {
	Name() string
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Log(args ...any)
	Logf(format string, args ...any)
	ResetTimer()
	StopTimer()
	ReportMetric(n float64, unit string)
	// iterations is b.N.
	iterations() int
}

// testingB is a *testing.B as a runB.
type testingB struct{ *testing.B }

func (b testingB) iterations() int { return b.N }

// sub is one sub-benchmark: its name within its benchmark's, the function
// each call runs, and the state it keeps across the calls of its -count runs
// (nil where it keeps none).
type sub struct {
	name string
	sb   *subBench
	run  func(b runB)
	// bench, set instead of run, is a sub-benchmark only go test runs (it
	// reports testing's allocation counts).
	bench func(b *testing.B)
}

// finish ends the sub-benchmark after its -count runs.
func (s sub) finish() error {
	if s.sb == nil {
		return nil
	}
	return s.sb.finish()
}

// subs returns the sub-benchmarks of benchmark bench (Server, Scenario,
// ServerOverhead, Capacity), whose full name is prefix, or why it runs none.
func (c *config) subs(prefix, bench string) ([]sub, string, error) {
	ps, skip := c.matrix(bench)
	out := make([]sub, 0, len(ps))
	for _, p := range ps {
		var s sub
		var err error
		switch bench {
		case "Server":
			s, err = c.serverSub(prefix, p)
		case "Scenario":
			s, err = c.scenarioSub(prefix, p)
		case "Capacity":
			s, err = c.capacitySub(prefix, p)
		case "ServerOverhead":
			s = overheadSub(p)
		}
		if err != nil {
			return nil, "", err
		}
		out = append(out, s)
	}
	return out, skip, nil
}

// runSubs runs benchmark bench's sub-benchmarks under go test.
func runSubs(b *testing.B, bench string) {
	subs, skip, err := conf.subs(b.Name(), bench)
	if err != nil {
		b.Fatal(err)
	}
	if skip != "" {
		report.skipped(b.Name(), skip) // go test prints a benchmark's skip only under -v
		b.Skip(skip)
	}
	for i, s := range subs {
		report.started(b.Name()+"/"+s.name, i, len(subs))
		b.Run(s.name, func(b *testing.B) {
			if s.bench != nil {
				s.bench(b)
				return
			}
			s.run(testingB{b})
		})
		if err := s.finish(); err != nil {
			b.Error(err)
		}
	}
}

// Where the suite writes: the benchmark lines and config lines (out), and
// the progress lines and the summary (report.w).
var out io.Writer = os.Stdout

// report is the run's progress and summary, for people: on stderr, apart
// from the benchmark lines that benchstat and the gate read.
var report = &reporter{w: os.Stderr}

// reporter prints a line as each sub-benchmark starts, with its index of
// its benchmark's total ("[3/24] BenchmarkServer/...": go test mixes stderr
// into stdout, and a line that began "word: " would read as a config line
// to benchstat), a line for a benchmark that runs nothing ("[skipped]
// BenchmarkCapacity: why"), and at the end a line per configuration measured:
// its throughput and median and 99th-percentile latency, the mean of its
// -count runs. Safe for concurrent use.
type reporter struct {
	mu    sync.Mutex
	w     io.Writer
	names []string // in the order first measured
	runs  map[string][]map[string]float64
}

func (r *reporter) started(name string, i, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "[%d/%d] %s\n", i+1, n, name)
}

// skipped says that benchmark name runs nothing, and why.
func (r *reporter) skipped(name, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "[skipped] %s: %s\n", name, why)
}

// add notes a finished run's figures.
func (r *reporter) add(run *exportRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string][]map[string]float64{}
	}
	if _, ok := r.runs[run.name]; !ok {
		r.names = append(r.names, run.name)
	}
	figs := map[string]float64{}
	for _, f := range run.figs {
		figs[f.unit] = f.value
	}
	r.runs[run.name] = append(r.runs[run.name], figs)
}

// summaryUnits are the figures the summary shows, with their headings.
var summaryUnits = []struct{ unit, head string }{
	{"samples/s", "samples/s"}, {"p50-latency-ns", "p50"}, {"p99-latency-ns", "p99"}, {"max-rate-req/s", "max req/s"},
}

// summary writes the summary and forgets the runs; nothing when none was
// measured.
func (r *reporter) summary() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.names) == 0 {
		return
	}
	// The columns some configuration has a figure of.
	var cols []int
	for i, u := range summaryUnits {
		for _, runs := range r.runs {
			if _, ok := runs[0][u.unit]; ok {
				cols = append(cols, i)
				break
			}
		}
	}
	tw := tabwriter.NewWriter(r.w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "configuration\truns\t")
	for _, i := range cols {
		fmt.Fprintf(tw, "%s\t", summaryUnits[i].head)
	}
	fmt.Fprintln(tw)
	for _, name := range r.names {
		runs := r.runs[name]
		fmt.Fprintf(tw, "%s\t%d\t", strings.TrimPrefix(name, "Benchmark"), len(runs))
		for _, i := range cols {
			u := summaryUnits[i]
			sum, n := 0.0, 0
			for _, figs := range runs {
				if v, ok := figs[u.unit]; ok {
					sum, n = sum+v, n+1
				}
			}
			switch {
			case n == 0:
				fmt.Fprint(tw, "-\t")
			case strings.HasSuffix(u.unit, "-ns"):
				fmt.Fprintf(tw, "%s\t", formatNs(sum/float64(n)))
			default:
				fmt.Fprintf(tw, "%.1f\t", sum/float64(n))
			}
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(r.w, "summary (the mean of each configuration's runs):")
	tw.Flush()
	r.names, r.runs = nil, nil
}

// formatNs writes nanoseconds as a duration of three significant digits.
func formatNs(ns float64) string {
	d, step := time.Duration(ns), time.Duration(1)
	for d/step >= 1000 {
		step *= 10
	}
	return d.Round(step).String()
}

// begin starts a run that benchmarks: an empty algorithm cache under -cold,
// the targets asked what they serve, the export files opened, and the config
// and Unit lines written.
func (c *config) begin() error {
	if c.flags.cold {
		os.Setenv(algoCacheEnv, coldCache)
	}
	if len(c.targets) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := c.probeTargets(ctx)
		cancel()
		if err != nil {
			return err
		}
	}
	var err error
	if exports, err = openExports(c); err != nil {
		return err
	}
	c.printConfig(out, c.deviceConfig())
	return nil
}

// end removes the server binary the run built, closes the export files and
// prints the summary.
func end() error {
	removeServeBuild()
	var err error
	if exports != nil {
		err = exports.close()
		exports = nil
	}
	report.summary()
	return err
}

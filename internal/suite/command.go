package suite

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ErrUsage marks a command-line mistake of the bench command; its message
// was printed already.
var ErrUsage = errors.New("suite: usage")

// benchUsage heads the bench command's -h.
const benchUsage = `usage: inferbench bench [flags]

Runs the benchmark suite (the same matrix, measurement and output as
go test -bench at the module's root) against an in-process server, inferbench
serve processes it starts (-transports), or running v2 servers (-target),
and prints benchmark lines that benchstat and scripts/gate read.

flags:
`

// Bench is the command inferbench bench: it parses args (the suite's flags,
// and -bench, -benchtime and -count in place of go test's), runs the
// sub-benchmarks one after another with the code go test runs, and writes
// the config, Unit and benchmark lines to stdout, and progress and the
// summary to stderr. A bad flag is reported before anything starts and
// returns ErrUsage; a failed sub-benchmark is reported and the others run.
func Bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inferbench bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	var f settings
	f.register(fs)
	benches := fs.String("bench", "Server", "the benchmarks to run, comma-separated: Server, Scenario, Capacity")
	benchtime := fs.String("benchtime", "100x", "iterations of each run, Nx as go test's -benchtime: requests (a capacity search each for Capacity); 1x with -window")
	count := fs.Uint("count", 1, "runs of each sub-benchmark, as go test's -count")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return ErrUsage // the flag package printed why
	}
	bad := func(err error) error {
		fmt.Fprintf(stderr, "inferbench bench: %v\n", err)
		return ErrUsage
	}
	if fs.NArg() > 0 {
		return bad(fmt.Errorf("unexpected argument %q: every setting is a flag (inferbench bench -h)", fs.Arg(0)))
	}
	names, err := oneOf("bench", *benches, "Server", "Scenario", "Capacity")
	if err == nil && len(names) == 0 {
		err = badFlag("bench", *benches, "give at least one of Server, Scenario, Capacity")
	}
	if err != nil {
		return bad(err)
	}
	n, err := strconv.Atoi(strings.TrimSuffix(*benchtime, "x"))
	if err != nil || !strings.HasSuffix(*benchtime, "x") || n < 1 {
		return bad(badFlag("benchtime", *benchtime, "want a count of iterations of at least 1, such as 100x"))
	}
	if *count < 1 {
		return bad(badFlag("count", strconv.FormatUint(uint64(*count), 10), "runs must be at least 1"))
	}
	c, err := f.validate(testingFlags{bench: strings.Join(names, ","), benchtime: *benchtime, count: *count}, gpuAvailable)
	if err != nil {
		return bad(err)
	}

	// The suite's state is the process's: this run's while it lasts.
	prevConf, prevOut, prevReport := conf, out, report
	conf, out, report, info = c, stdout, &reporter{w: stderr}, infoLines{}
	defer func() { conf, out, report, info = prevConf, prevOut, prevReport, infoLines{} }()
	if err := c.begin(); err != nil {
		return bad(err)
	}
	printHeader(stdout)
	var failed []string
	for _, bench := range names {
		prefix := "Benchmark" + bench
		subs, _, err := c.subs(prefix, bench)
		if err != nil {
			failed = append(failed, prefix)
			fmt.Fprintf(stdout, "--- FAIL: %s\n    %v\n", prefix, err)
			continue
		}
		for i, s := range subs {
			if ctx.Err() != nil {
				break
			}
			report.started(prefix+"/"+s.name, i, len(subs))
			if !runCommandSub(stdout, prefix+"/"+s.name, s, n, int(*count)) {
				failed = append(failed, prefix+"/"+s.name)
			}
			if err := s.finish(); err != nil {
				failed = append(failed, prefix+"/"+s.name)
				fmt.Fprintf(stdout, "--- FAIL: %s\n    %v\n", prefix+"/"+s.name, err)
			}
		}
	}
	endErr := end()
	switch {
	case ctx.Err() != nil:
		return errors.Join(ctx.Err(), endErr)
	case len(failed) > 0:
		return errors.Join(fmt.Errorf("%d sub-benchmarks failed: %s", len(failed), strings.Join(failed, ", ")), endErr)
	}
	return endErr
}

// printHeader writes the lines go test writes before its first benchmark
// line, so that results of either compare in one benchstat table.
func printHeader(w io.Writer) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/inferbench/inferbench\n", runtime.GOOS, runtime.GOARCH)
	if name := cpuName(); name != "" {
		fmt.Fprintf(w, "cpu: %s\n", name)
	}
}

// cpuName is the CPU's model name (Linux: /proc/cpuinfo), or "".
func cpuName() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// runCommandSub runs the count runs of sub-benchmark s as go test does
// under -benchtime Nx (each run a call with b.N 1, then one with b.N n) and
// writes each run's benchmark line, and its logs, as go test does. It
// reports whether every call passed.
func runCommandSub(w io.Writer, name string, s sub, n, count int) bool {
	line := name
	if p := runtime.GOMAXPROCS(0); p != 1 {
		line += "-" + strconv.Itoa(p)
	}
	for range count {
		b := &cmdB{name: name, n: 1}
		b.call(s.run)
		if !b.failed && n > 1 {
			b = &cmdB{name: name, n: n}
			b.call(s.run)
		}
		if b.failed {
			fmt.Fprintf(w, "--- FAIL: %s\n", name)
			for _, l := range b.logs {
				fmt.Fprintf(w, "    %s\n", strings.ReplaceAll(l, "\n", "\n    "))
			}
			return false
		}
		r := testing.BenchmarkResult{N: b.n, T: b.elapsed, Extra: b.extra}
		fmt.Fprintf(w, "%s\t%s\n", line, r.String())
		for _, l := range b.logs {
			fmt.Fprintf(w, "    %s\n", strings.ReplaceAll(l, "\n", "\n    "))
		}
	}
	return true
}

// cmdB is the bench command's runB: one call of a sub-benchmark with b.N n,
// timed as testing times it (from the call, or the last ResetTimer, to its
// end or StopTimer).
type cmdB struct {
	name    string
	n       int
	mu      sync.Mutex
	start   time.Time
	elapsed time.Duration
	timing  bool
	extra   map[string]float64
	logs    []string
	failed  bool
}

// call runs run on its own goroutine (Fatal ends it) and waits.
func (b *cmdB) call(run func(runB)) {
	b.start, b.timing, b.extra = time.Now(), true, map[string]float64{}
	done := make(chan struct{})
	go func() { // waited for below
		defer close(done)
		run(b)
	}()
	<-done
	b.StopTimer()
}

func (b *cmdB) Name() string    { return b.name }
func (b *cmdB) iterations() int { return b.n }

func (b *cmdB) Log(args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.logs = append(b.logs, strings.TrimSuffix(fmt.Sprintln(args...), "\n"))
}

func (b *cmdB) Logf(format string, args ...any) { b.Log(fmt.Sprintf(format, args...)) }

// Fatal logs args, marks the call failed and ends its goroutine.
func (b *cmdB) Fatal(args ...any) {
	b.Log(args...)
	b.mu.Lock()
	b.failed = true
	b.mu.Unlock()
	runtime.Goexit()
}

func (b *cmdB) Fatalf(format string, args ...any) { b.Fatal(fmt.Sprintf(format, args...)) }

// ResetTimer zeroes the time so far and forgets the metrics reported, as
// testing's does.
func (b *cmdB) ResetTimer() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timing {
		b.start = time.Now()
	}
	b.elapsed = 0
	b.extra = map[string]float64{}
}

func (b *cmdB) StopTimer() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timing {
		b.elapsed += time.Since(b.start)
		b.timing = false
	}
}

func (b *cmdB) ReportMetric(v float64, unit string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.extra[unit] = v
}

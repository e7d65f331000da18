// Command gate is the benchmark regression gate: it compares a base and a
// head file in the Go benchmark format and fails only on a real slowdown.
//
// The gate works in four steps:
//
//  1. Read both files with golang.org/x/perf/benchfmt; keep the results that
//     match -filter (benchproc filter syntax). Units are tidied as benchstat
//     does (ns/op becomes sec/op, p50-latency-ns becomes p50-latency-sec).
//  2. Group the measurements by full benchmark name and unit. A benchmark
//     whose results were measured under different config lines (model:,
//     size:, gpu:...; commit:, date:, matrix: and -ignore keys aside),
//     within a file or between the files, stops the gate with exit status 2
//     naming the lines: benchstat would split such runs, and comparing them
//     would compare two setups. A line only one file has is named in a note.
//  3. Compare, per benchmark, the units -units selects with
//     golang.org/x/perf/benchmath: the centre is the median and the test is
//     Mann-Whitney U (as benchstat does), unless the file declares "Unit X
//     assume=exact". By default (no -units) a benchmark is gated on one
//     primary figure, the first unit of -primary it reports in both files:
//     cpu-sec/op (CPU time per operation, derived from the suite's
//     cpu-util-pct and sec/op; it barely moves when other jobs share the
//     cores), else the p50 latency, else its throughput; its throughput and
//     latency percentiles are shown as secondary rows and never fail the
//     gate. -units gates every unit it names. Each group needs at least
//     -min-runs values on each side. The p-values of the gated comparisons
//     are adjusted by the Holm-Bonferroni method, so that the chance of a
//     false alarm over all of them stays at most -alpha. The direction
//     comes from "Unit X better=higher|lower" lines; a unit without one is
//     taken as lower-is-better.
//  4. A group is a regression only when the adjusted p-value is below
//     -alpha and the change is worse than its threshold (-threshold, 5 % by
//     default, per unit overridable); a time figure below the noise floor
//     (-floor, 1 µs) is judged against the floor. Print the verdict table;
//     exit with status 1 if any group regressed, 2 on a usage or input
//     error.
//
// Usage:
//
//	go run ./scripts/gate [flags] base.txt head.txt
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		// -h printed the usage: that is what was asked for.
	case errors.Is(err, ErrRegression):
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

// run parses args, compares the two files they name and writes the verdict
// table to stdout. It returns an error wrapping ErrRegression when the gate
// fails, and another error for bad flags or unreadable input.
func run(args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	base, err := readFile(cfg.base, cfg)
	if err != nil {
		return err
	}
	head, err := readFile(cfg.head, cfg)
	if err != nil {
		return err
	}
	if err := checkConfig(stdout, base, head); err != nil {
		return err
	}
	verdicts, err := compare(base, head, cfg)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(verdicts, func(v verdict) bool { return v.status != onlyBase && v.status != onlyHead }) {
		return fmt.Errorf("gate: no benchmark and unit is in both %s and %s (after -filter and -units): nothing to compare", cfg.base, cfg.head)
	}
	if err := writeTable(stdout, verdicts, cfg); err != nil {
		return fmt.Errorf("gate: writing table: %w", err)
	}
	return summarize(stdout, verdicts)
}

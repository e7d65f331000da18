// Command report turns benchmark result files into a markdown report with
// PNG plots.
//
// It works in four steps:
//
//  1. Read the files (Go benchmark format, as written by go test -bench,
//     scripts/sweep or scripts/pytorch_bench.py) with
//     golang.org/x/perf/benchfmt, keeping results that match -filter
//     (benchproc filter syntax).
//  2. Group the measurements by full benchmark name (one configuration) and
//     unit; summarise each group as mean ± standard deviation (like the
//     seed's process_metrics.py), median and the median's 95 % confidence
//     interval (golang.org/x/perf/benchmath, as benchstat computes it).
//  3. Write report.md: per benchmark a summary table with one row per
//     configuration and a column per varying sub-benchmark key, then a
//     detailed table per configuration with every unit.
//  4. For the -plot benchmark (BenchmarkServer by default), project each
//     result onto its batch size (x) and the other keys (one line per
//     distinct setting), pick the best configuration at each batch size for
//     the headline, and draw with gonum.org/v1/plot: headline.png (the best
//     configuration against PyTorch and the seed's cited figures),
//     throughput.png (samples/s vs batch), latency.png (p50 and p99 vs
//     batch) and stages.png (stacked mean queue, copy-in, compute and
//     copy-out time per request, a panel per batch size). More lines than a
//     legend holds become small multiples, a panel per precision x graphs.
//
// Two subcommands keep the record (results/) in order:
//
//   - report index [-check] writes results/index.json and results/README.md,
//     one entry a record (a folder or loose file directly under
//     results/<machine>/), each field derived from the record's files, its
//     README, the machine's README, git or results/records.tsv; -check
//     fails when they are stale, a file belongs to no record, a .diff file
//     is kept or a relative link of the READMEs is broken.
//   - report headline [-o file] [-readme file] [-check] writes the README's
//     table of headline figures, each the best configuration of a benchmark
//     file of a record (headlineSpecs), linked to it.
//
// Usage:
//
//	go run ./scripts/report [-o dir] [-filter query] file.txt...
//	go run ./scripts/report index [-check]
//	go run ./scripts/report headline [-o results/HEADLINE.md] [-readme README.md] [-check]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/perf/benchproc"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		// -h printed the usage: that is what was asked for.
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// options holds the parsed command line.
type options struct {
	out    string // output directory
	title  string
	plot   string // base name of the benchmark to plot, e.g. Server
	filter *benchproc.Filter
	noPNG  bool
	files  []string
}

// run parses args, reads the files and writes report.md and the plots into
// the output directory; it prints the paths it wrote to stdout.
func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "index":
			return runIndex(args[1:], stdout, stderr, gitLog)
		case "headline":
			return runHeadline(args[1:], stdout, stderr, headlineSpecs)
		}
	}
	opts, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ds, err := read(opts.files, opts.filter)
	if err != nil {
		return err
	}
	if len(ds.groups) == 0 {
		return errors.New("report: no benchmark results in the input")
	}
	if err := os.MkdirAll(opts.out, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	ss := collectSeries(ds, opts.plot)
	hl := headlineOf(ds, ss)
	var images []string
	if !opts.noPNG {
		images, err = writePlots(opts.out, ss, hl)
		if err != nil {
			return err
		}
	}
	md := filepath.Join(opts.out, "report.md")
	f, err := os.Create(md)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := writeMarkdown(f, ds, opts.title, images, hl); err != nil {
		f.Close()
		return fmt.Errorf("report: writing %s: %w", md, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	for _, p := range append([]string{"report.md"}, images...) {
		fmt.Fprintln(stdout, filepath.Join(opts.out, p))
	}
	return nil
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	opts := &options{}
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: report [flags] file.txt...\n       report index [-check]\n       report headline [-o file] [-readme file] [-check]\n\nWrites report.md and PNG plots from Go benchmark result files; index and headline keep results/ in order (report index -h).\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&opts.out, "o", "report", "write report.md and the PNGs into `dir`")
	fs.StringVar(&opts.title, "title", "Benchmark report", "report `title`")
	fs.StringVar(&opts.plot, "plot", "Server", "plot the benchmark with this base `name` (without the Benchmark prefix)")
	fs.BoolVar(&opts.noPNG, "no-png", false, "write only report.md")
	filter := fs.String("filter", "*", "use only results matching benchproc filter `query`, e.g. '/precision:fp16'")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return nil, errors.New("report: no input files")
	}
	opts.files = fs.Args()
	f, err := benchproc.NewFilter(*filter)
	if err != nil {
		return nil, fmt.Errorf("report: -filter: %w", err)
	}
	opts.filter = f
	return opts, nil
}

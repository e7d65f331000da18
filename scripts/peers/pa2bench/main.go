// Command pa2bench turns perf_analyzer's CSV files (its -f output) into Go
// benchmark lines, so that benchstat can put perf_analyzer's figures beside
// the suite's for the same server and configuration.
//
// It works in three steps:
//
//  1. Read each file named pa-<protocol>-<shm>-b<B>-c<C>.csv (the names
//     scripts/peers/perf_analyzer.sh writes): the protocol (grpc or http),
//     perf_analyzer's --shared-memory (none, system or cuda), the batch size and
//     the concurrency come from the name.
//  2. Take each CSV row (one per concurrency perf_analyzer measured):
//     "Inferences/Second" is images per second, and the latency columns
//     (microseconds, perf_analyzer's own clock, over the requests of its
//     stable measurement windows) become nanoseconds.
//  3. Print one line per row named as the suite names a -target run, with
//     client=perf_analyzer added:
//     BenchmarkServer/batch=B/servers=1/load=closed/concurrency=C/transport=T/client=perf_analyzer,
//     where T is grpc, http, grpc-shm, http-shm, grpc-cudashm or http-cudashm.
//     Config lines given with
//     -config key=value are printed first.
//
// Units: samples/s and req/s; p50-, p90-, p95-, p99- and mean-latency-ns
// (perf_analyzer's client-side latency, from its send to its receipt of the
// answer); queue-ns, h2d-ns, compute-ns and d2h-ns (the server's statistics
// extension averages that perf_analyzer reads: queue, compute input, compute
// infer, compute output). A column perf_analyzer did not write is absent.
//
// Usage:
//
//	go run ./scripts/peers/pa2bench [-config key=value]... file.csv...
package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pa2bench:", err)
		os.Exit(1)
	}
}

// configs collects repeated -config key=value flags.
type configs []string

func (c *configs) String() string { return strings.Join(*c, ",") }

func (c *configs) Set(v string) error {
	k, _, ok := strings.Cut(v, "=")
	if !ok || k == "" || strings.ContainsAny(k, " :") {
		return fmt.Errorf("want key=value with a key of no spaces or colons, got %q", v)
	}
	*c = append(*c, v)
	return nil
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pa2bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg configs
	fs.Var(&cfg, "config", "a config line key=value printed before the results (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("no CSV files given")
	}
	for _, kv := range cfg {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(stdout, "%s: %s\n", k, v)
	}
	for _, u := range units {
		fmt.Fprintf(stdout, "Unit %s better=%s\n", u.name, u.better)
	}
	for _, path := range fs.Args() {
		if err := convert(path, stdout); err != nil {
			return err
		}
	}
	return nil
}

// unit is one figure: the CSV column it comes from and the factor to the
// unit's scale (microseconds to nanoseconds).
type unit struct {
	name, column, better string
	scale                float64
}

var units = []unit{
	{"samples/s", "Inferences/Second", "higher", 1},
	{"req/s", "", "higher", 0}, // samples/s over the batch size
	{"mean-latency-ns", "Avg latency", "lower", 1e3},
	{"p50-latency-ns", "p50 latency", "lower", 1e3},
	{"p90-latency-ns", "p90 latency", "lower", 1e3},
	{"p95-latency-ns", "p95 latency", "lower", 1e3},
	{"p99-latency-ns", "p99 latency", "lower", 1e3},
	{"queue-ns", "Server Queue", "lower", 1e3},
	{"h2d-ns", "Server Compute Input", "lower", 1e3},
	{"compute-ns", "Server Compute Infer", "lower", 1e3},
	{"d2h-ns", "Server Compute Output", "lower", 1e3},
}

var fileName = regexp.MustCompile(`^pa-(grpc|http)-(none|system|cuda)-b([0-9]+)-c([0-9]+)\.csv$`)

// convert prints the benchmark lines of one perf_analyzer CSV file.
func convert(path string, w io.Writer) error {
	m := fileName.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return fmt.Errorf("%s: want a name pa-<grpc|http>-<none|system|cuda>-b<B>-c<C>.csv", path)
	}
	transport := m[1]
	switch m[2] {
	case "system":
		transport += "-shm"
	case "cuda":
		transport += "-cudashm"
	}
	batch, _ := strconv.Atoi(m[3])
	if batch < 1 {
		return fmt.Errorf("%s: batch %d, want at least 1", path, batch)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) < 2 {
		return fmt.Errorf("%s: no measurements (a header and %d rows)", path, len(rows)-1)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[strings.TrimSpace(h)] = i
	}
	ci, ok := col["Concurrency"]
	if !ok {
		return fmt.Errorf("%s: no Concurrency column in %q", path, rows[0])
	}
	for n, row := range rows[1:] {
		if len(row) != len(rows[0]) {
			return fmt.Errorf("%s: row %d has %d fields, the header %d", path, n+1, len(row), len(rows[0]))
		}
		fmt.Fprintf(w, "BenchmarkServer/batch=%d/servers=1/load=closed/concurrency=%s/transport=%s/client=perf_analyzer 1", batch, row[ci], transport)
		perSecond := -1.0
		for _, u := range units {
			if u.column == "" {
				if perSecond >= 0 {
					fmt.Fprintf(w, " %.6g %s", perSecond/float64(batch), u.name)
				}
				continue
			}
			i, ok := col[u.column]
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(row[i]), 64)
			if err != nil {
				return fmt.Errorf("%s: row %d, column %q: %w", path, n+1, u.column, err)
			}
			if u.name == "samples/s" {
				perSecond = v
			}
			fmt.Fprintf(w, " %.6g %s", v*u.scale, u.name)
		}
		fmt.Fprintln(w)
	}
	return nil
}

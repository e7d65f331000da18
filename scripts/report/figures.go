package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchproc"
)

// A figureSpec is one row of the headline table: the best of our
// configurations that a filter selects in one benchmark-format file of a
// record, and figures measured beside it in the same record.
type figureSpec struct {
	label  string // what the row shows
	record string // results/<machine>/<name>
	file   string // the benchmark file, relative to the record
	filter string // benchproc filter selecting our configurations
	unit   string // as the file spells it: samples/s, images/s, p50-latency-ns
	how    string // interval, clock and requests, as the record states them
	// gpu, when set, is the hardware column: the GPU the record's README
	// names, for a file without a gpu: line (a package's own benchmarks
	// printed only cpu:).
	gpu    string
	beside []besideSpec
}

// besideSpec is a figure measured in the same record, in the same unit: the
// best configuration its filter selects in its file.
type besideSpec struct {
	label  string
	file   string // relative to the record
	filter string
}

// headlineSpecs are the README's headline figures. Each comes from the
// newest record that measured it.
var headlineSpecs = []figureSpec{
	{
		label: "GPU, in process, batch 1", record: "results/nvidia-h200/record-bbd5f3d",
		file: "batch1-burst.txt", filter: "/batching:off", unit: "samples/s",
		how: "a burst of 600 one-image requests after one unmeasured request; images answered / host wall time from the first send to the last answer",
		beside: []besideSpec{
			{"PyTorch 2.11 eager, serial loop", "pytorch.txt", ".name:Server /backend:pytorch-eager /batch:1"},
			{"PyTorch overlapped loop (3 streams, CUDA graphs)", "pytorch.txt", ".name:Server /backend:pytorch-graph /batch:1"},
		},
	},
	{
		label: "GPU, in process, batch-1 requests merged by the dynamic batcher", record: "results/nvidia-h200/record-bbd5f3d",
		file: "batch1-burst.txt", filter: "/batching:on", unit: "samples/s",
		how: "a burst of 600 one-image requests, merged into batches of up to 64 (at most 1 ms wait); images answered / host wall time from the first send to the last answer",
	},
	{
		label: "GPU, in process, batch 32", record: "results/nvidia-h200/record-bbd5f3d",
		file: "inproc-burst.txt", filter: "/batch:32", unit: "samples/s",
		how: "bursts of 200 requests after one unmeasured request; images answered / host wall time from the first send to the last answer",
		beside: []besideSpec{
			{"ours, fp32 input", "inproc-burst.txt", "/batch:32 /input:fp32"},
			{"PyTorch 2.11 eager, serial loop", "pytorch.txt", ".name:Server /backend:pytorch-eager /batch:32"},
			{"PyTorch overlapped loop", "pytorch.txt", ".name:Server /backend:pytorch-graph /batch:32"},
		},
	},
	{
		label: "GPU, in process, batch 256", record: "results/nvidia-h200/record-bbd5f3d",
		file: "inproc-burst.txt", filter: "/batch:256", unit: "samples/s",
		how: "bursts of 200 requests after one unmeasured request; images answered / host wall time from the first send to the last answer",
		beside: []besideSpec{
			{"ours, fp32 input", "inproc-burst.txt", "/batch:256 /input:fp32"},
			{"PyTorch 2.11 eager, serial loop", "pytorch.txt", ".name:Server /backend:pytorch-eager /batch:256"},
			{"torch.compile max-autotune, forward pass alone, input on the GPU", "pytorch.txt", ".name:Forward /backend:pytorch-compile-max /batch:256"},
		},
	},
	{
		label: "4 GPUs, 4 server processes, gRPC + system shared memory, batch 256", record: "results/nvidia-h200/scaleout-x4-94852ef",
		file: "b256.txt", filter: "/servers:4", unit: "samples/s",
		how: "one suite drives 4 servers, a GPU each, least outstanding first; closed loop, 4 requests outstanding a server on 4 gRPC connections each, 1,500 requests a run; images / the suite's wall time from the first send to the last answer",
		beside: []besideSpec{
			{"1 server, 1 GPU", "b256.txt", "/servers:1"},
			{"one process over the 4 GPUs", "b256-oneproc.txt", "/servers:1"},
			{"4 servers, uint8 input (a quarter of the bytes)", "b256-uint8.txt", "/servers:4"},
		},
	},
	{
		label: "4 GPUs, 4 server processes, batch-1 traffic (256 closed clients, dynamic batching)", record: "results/nvidia-h200/scaleout-x4-94852ef",
		file: "b1-batching.txt", filter: "/servers:4", unit: "samples/s",
		how: "256 one-image requests outstanding over 4 servers over gRPC + system shared memory, merged by each server's dynamic batcher, 100,000 requests a run; images / the suite's wall time",
		beside: []besideSpec{
			{"1 server, 1 GPU", "b1-batching.txt", "/servers:1"},
			{"one process over the 4 GPUs", "b1-batching-oneproc.txt", "/servers:1"},
		},
	},
	{
		label: "GPU, gRPC + system shared memory, batch 256", record: "results/nvidia-h200/record-c0fbf3c",
		file: "batch256.txt", filter: "/transport:grpc-shm", unit: "samples/s",
		how: "closed loop, 4 requests outstanding on 4 gRPC connections, 60 requests a run, server in its own process on loopback; images / the suite's wall time from the first send to the last answer, connection warm-up left out",
		beside: []besideSpec{
			{"in process", "batch256.txt", "/transport:inproc"},
			{"gRPC without shared memory", "batch256.txt", "/transport:grpc"},
		},
	},
	{
		label: "GPU, batch-1 latency p50, in process, worker and caller polling", record: round5,
		file: "callG/one-client-poll.txt", filter: "/pipeline:serial", unit: "p50-latency-ns",
		how: "closed loop, one request at a time, 5,000 requests a run, one serial worker; the worker (-idle-poll 1ms) and the caller (-client-poll 1ms) look for work before they sleep; from the intended send to the decoded answer on the suite's clock",
		beside: []besideSpec{
			{"fp32 input", "callG/one-client-poll.txt", "/pipeline:serial /input:fp32"},
			{"worker and caller sleeping at once, uint8", "callG/one-client-sleep.txt", "/pipeline:serial /input:uint8"},
		},
	},
	{
		label: "GPU, batch-1 latency p50, gRPC", record: "results/nvidia-h200/record-c0fbf3c",
		file: "batch1.txt", filter: "/transport:grpc", unit: "p50-latency-ns",
		how: "closed loop, one request at a time, 2,000 requests a run, server in its own process on loopback; from the intended send to the decoded answer on the suite's clock",
		beside: []besideSpec{
			{"gRPC + system shared memory", "batch1.txt", "/transport:grpc-shm"},
		},
	},
	pytorchLoop(1), pytorchLoop(32), pytorchLoop(256),
	forwardBeside(1), forwardBeside(32), forwardBeside(256),
	{
		label: "GPU, gRPC, uint8 input, batch 256", record: round3,
		file: "call2/c-b256-uint8.txt", filter: "/transport:grpc", unit: "samples/s",
		how: "closed loop, 16 requests outstanding on 16 gRPC connections, 600 requests a run, server in its own process on loopback; images / the suite's wall time from the first send to the last answer, connection warm-up excluded",
		beside: []besideSpec{
			{"the same before 3b67dc4 (input copied from pageable memory), call 1", "call1/c-b256-uint8.txt", "/transport:grpc"},
			{"in process, call 1", "call1/c-b256-uint8.txt", "/transport:inproc"},
		},
	},
	{
		label: "GPU, batch-1 traffic (256 closed clients, dynamic batching), in process, uint8 input", record: round3,
		file: "call1/b-inproc.txt", filter: "/input:uint8", unit: "samples/s",
		how: "256 one-image requests outstanding, merged into batches of up to 64 (at most 1 ms wait), 60,000 requests a run; images / the suite's wall time from the first send to the last answer",
		beside: []besideSpec{
			{"fp32 input", "call1/b-inproc.txt", "/input:fp32"},
			{"gRPC + system shared memory, uint8, 8 connections", "call1/b-grpcshm.txt", "/input:uint8"},
			{"gRPC, uint8, 16 connections (call 2)", "call2/b-grpc-uint8.txt", "/input:uint8"},
		},
	},
	cpuCompare(2, 1), cpuCompare(2, 8), cpuCompare(16, 1), cpuCompare(16, 8),
}

// pytorchLoop is the row of ours beside PyTorch's overlapped serving loop
// at one batch size, both measured in one call.
func pytorchLoop(batch int) figureSpec {
	return figureSpec{
		label:  fmt.Sprintf("GPU, in process, batch %d, beside PyTorch's overlapped loop", batch),
		record: "results/nvidia-h200/pytorch-graph-fc00fa8",
		file:   "inproc-burst.txt", filter: fmt.Sprintf("/batch:%d", batch), unit: "samples/s",
		how: "bursts of 200 requests of fp32 images from pinned memory after one unmeasured request, both in one call; images / host wall time from the first send to the last answer",
		beside: []besideSpec{
			{"PyTorch 2.11 overlapped loop (3 streams, CUDA graphs, fp16 channels-last)", "pytorch-graph.txt", fmt.Sprintf(".name:Server /batch:%d", batch)},
		},
	}
}

// round5 is issue 37's fifth round.
const round5 = "results/nvidia-h200/round5-a8fe7e6"

// round3 is issue 37's record: four calls on H200s.
const round3 = "results/nvidia-h200/round3-c1879ed"

// forwardBeside is the row of our forward pass alone beside torch.compile
// max-autotune's, forward alone (compile-max) and replayed in the overlapped
// loop's CUDA graphs (graph-max, whose forward lines carry graphs=on), in
// the same calls.
func forwardBeside(batch int) figureSpec {
	graphMax := "call4/forward-pytorch.txt"
	if batch == 32 {
		graphMax = "call3/forward-pytorch.txt"
	}
	return figureSpec{
		label:  fmt.Sprintf("GPU, forward pass alone, batch %d", batch),
		record: round3,
		file:   "call3/forward-ours.txt", filter: fmt.Sprintf("/batch:%d /datatype:fp32", batch), unit: "samples/s", gpu: "NVIDIA H200",
		how: "the batch already on the GPU; one CUDA-graph replay (fp32 input converted inside) and the logits' copy, waited for on the host, per batch; images / host wall time, over testing.B's 2 s loop (PyTorch: 50 calls, synchronised each)",
		beside: []besideSpec{
			{"torch.compile max-autotune, forward alone, static shapes", "call3/forward-pytorch.txt", fmt.Sprintf(".name:Forward /batch:%d -/graphs:on", batch)},
			{"max-autotune kernels in the overlapped loop's CUDA graphs (graph-max), one replay", graphMax, fmt.Sprintf(".name:Forward /batch:%d /graphs:on", batch)},
		},
	}
}

// cpuCompare is the row of the CPU back-end beside PyTorch and onnxruntime
// at one thread count and batch size.
func cpuCompare(threads, batch int) figureSpec {
	f := fmt.Sprintf("/threads:%d /batch:%d", threads, batch)
	return figureSpec{
		label:  fmt.Sprintf("CPU forward pass, %d threads, batch %d", threads, batch),
		record: "results/nvidia-h200/round4-04543f5",
		file:   "callD/cpu-compare.txt", filter: "/backend:cpu " + f, unit: "images/s",
		how: fmt.Sprintf("scripts/cpu-compare.sh, back-ends interleaved, each process pinned to %d CPUs; batch / mean wall time of a pass over testing.B's 1 s loop after one untimed pass", threads),
		beside: []besideSpec{
			{"PyTorch 2.11, NCHW (channels-last not run in this call)", "callD/cpu-compare.txt", "/backend:pytorch " + f},
			{"onnxruntime 1.30", "callD/cpu-compare.txt", "/backend:onnxruntime " + f},
		},
	}
}

// figure is the best configuration a filter selects in a file.
type figure struct {
	name     string  // full benchmark name
	median   float64 // in the file's unit
	runs     int
	hardware string // the file's gpu: line, else its cpu: line
	differs  string // the keys that set it apart from the other candidates
}

// Markers of the headline block in a markdown file.
const (
	headlineBegin = "<!-- headline:begin -->"
	headlineEnd   = "<!-- headline:end -->"
)

// runHeadline is "report headline": it writes the headline table (to
// stdout, to -o, into the marked block of -readme) or with -check verifies
// that -o and the -readme block are current.
func runHeadline(args []string, stdout, stderr io.Writer, specs []figureSpec) error {
	fs := flag.NewFlagSet("report headline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: report headline [-root dir] [-o file] [-readme file] [-check]\n\nWrites the table of the headline figures, each read from a benchmark file of a record.\n\n")
		fs.PrintDefaults()
	}
	root := fs.String("root", ".", "the repository's root `dir`")
	out := fs.String("o", "", "write the table to `file` (relative to -root), e.g. "+headlineMD)
	readme := fs.String("readme", "", "rewrite the block between "+headlineBegin+" and "+headlineEnd+" in `file` (relative to -root)")
	check := fs.Bool("check", false, "write nothing; fail when -o or the -readme block (where the markers exist) is not current")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("report headline: %w", err)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("report headline: unexpected argument %q", fs.Arg(0))
	}
	if *out == "" && *readme == "" {
		if *check {
			return errors.New("report headline: -check needs -o or -readme")
		}
		table, err := headlineTable(*root, specs, ".")
		if err != nil {
			return err
		}
		_, err = io.WriteString(stdout, table)
		return err
	}
	var problems []string
	if *out != "" {
		table, err := headlineTable(*root, specs, path.Dir(*out))
		if err != nil {
			return err
		}
		want := "# Headline figures\n\n<!-- Generated by go run ./scripts/report headline; do not edit. -->\n\n" + table
		file := filepath.Join(*root, filepath.FromSlash(*out))
		if *check {
			if old, err := os.ReadFile(file); err != nil || string(old) != want {
				problems = append(problems, fmt.Sprintf("%s is not what the records give: run go run ./scripts/report headline -o %s", *out, *out))
			}
		} else {
			if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
				return fmt.Errorf("report headline: %w", err)
			}
			fmt.Fprintln(stdout, *out)
		}
	}
	if *readme != "" {
		table, err := headlineTable(*root, specs, path.Dir(*readme))
		if err != nil {
			return err
		}
		file := filepath.Join(*root, filepath.FromSlash(*readme))
		old, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("report headline: %w", err)
		}
		updated, found, err := replaceBlock(string(old), table)
		switch {
		case err != nil:
			return fmt.Errorf("report headline: %s: %w", *readme, err)
		case !found && *check:
			// No markers: the file does not carry the table.
		case !found:
			return fmt.Errorf("report headline: %s has no %s ... %s block", *readme, headlineBegin, headlineEnd)
		case *check && updated != string(old):
			problems = append(problems, fmt.Sprintf("%s: the headline block is not what the records give: run go run ./scripts/report headline -readme %s", *readme, *readme))
		case !*check:
			if err := os.WriteFile(file, []byte(updated), 0o644); err != nil {
				return fmt.Errorf("report headline: %w", err)
			}
			fmt.Fprintln(stdout, *readme)
		}
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		return fmt.Errorf("report headline: %d problems", len(problems))
	}
	return nil
}

// replaceBlock puts table between the headline markers of md. It reports
// whether the markers exist; they must each appear once, begin first.
func replaceBlock(md, table string) (string, bool, error) {
	b, e := strings.Count(md, headlineBegin), strings.Count(md, headlineEnd)
	if b == 0 && e == 0 {
		return md, false, nil
	}
	if b != 1 || e != 1 {
		return "", true, fmt.Errorf("want one %s and one %s, have %d and %d", headlineBegin, headlineEnd, b, e)
	}
	i := strings.Index(md, headlineBegin) + len(headlineBegin)
	j := strings.Index(md, headlineEnd)
	if j < i {
		return "", true, fmt.Errorf("%s comes before %s", headlineEnd, headlineBegin)
	}
	return md[:i] + "\n" + table + md[j:], true, nil
}

// headlineTable reads every figure and renders the table, its links
// relative to the folder base (slash-separated, from the root).
func headlineTable(root string, specs []figureSpec, base string) (string, error) {
	var b strings.Builder
	b.WriteString("| figure | this server | measured beside it | best configuration | hardware | how it was measured | record |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, s := range specs {
		file := path.Join(s.record, s.file)
		ours, n, err := bestFigure(root, file, s.filter, s.unit)
		if err != nil {
			return "", fmt.Errorf("report headline: %s: %w", s.label, err)
		}
		var beside []string
		for _, bs := range s.beside {
			f, _, err := bestFigure(root, path.Join(s.record, bs.file), bs.filter, s.unit)
			if err != nil {
				return "", fmt.Errorf("report headline: %s, %s: %w", s.label, bs.label, err)
			}
			label := bs.label
			if f.differs != "" {
				label += " (" + f.differs + ")"
			}
			beside = append(beside, fmt.Sprintf("%s: %s, %s", label, formatFigure(s.unit, f.median), medianOf(f.runs)))
		}
		cfg := "`" + configLabel(ours.name) + "`"
		if n > 1 {
			cfg = fmt.Sprintf("%s, best of %d", cfg, n)
		}
		besideCell := "-"
		if len(beside) > 0 {
			besideCell = strings.Join(beside, "; ")
		}
		fmt.Fprintf(&b, "| %s | **%s** | %s | %s | %s | %s, %s | %s |\n",
			s.label, formatFigure(s.unit, ours.median), cell(besideCell), cell(cfg), cell(firstNonEmpty(s.gpu, ours.hardware)),
			cell(s.how), medianOf(ours.runs), recordLink(root, base, s.record, s.file))
	}
	return b.String(), nil
}

// recordLink links the record (its README where it has one) and the file.
func recordLink(root, base, record, file string) string {
	rel := func(p string) string {
		r, err := filepath.Rel(filepath.FromSlash(base), filepath.FromSlash(p))
		if err != nil {
			return p
		}
		if strings.HasSuffix(p, "/") {
			r += "/"
		}
		return filepath.ToSlash(r)
	}
	target := record + "/"
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(record), "README.md")); err == nil {
		target = record + "/README.md"
	}
	return fmt.Sprintf("[%s](%s) ([%s](%s))", path.Base(record), rel(target), file, rel(path.Join(record, file)))
}

// medianOf states how many runs a median is of.
func medianOf(n int) string {
	if n == 1 {
		return "one run"
	}
	return fmt.Sprintf("median of %d runs", n)
}

// lowerIsBetter reports whether a unit's best configuration is its lowest:
// times, in the suite's units, end in -ns.
func lowerIsBetter(unit string) bool { return strings.HasSuffix(unit, "-ns") || unit == "sec/op" }

// formatFigure prints a median for a reader: latencies in milliseconds,
// rates with thousands separators or, below 1,000, four significant digits.
func formatFigure(unit string, v float64) string {
	if strings.HasSuffix(unit, "-ns") {
		return fmt.Sprintf("%.3f ms", v/1e6)
	}
	var num string
	switch {
	case v >= 1000:
		num = thousands(int64(math.Round(v)))
	case v >= 100:
		num = fmt.Sprintf("%.1f", v)
	default:
		num = fmt.Sprintf("%.2f", v)
	}
	return num + " " + unit
}

// thousands prints n with commas between groups of three digits.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// configLabel is a configuration's benchmark name as the file has it,
// without the GOMAXPROCS suffix.
func configLabel(name string) string {
	base, parts := benchfmt.Name(name).Parts()
	var b strings.Builder
	b.WriteString("Benchmark" + string(base))
	for _, p := range parts {
		if !strings.HasPrefix(string(p), "-") {
			b.Write(p)
		}
	}
	return b.String()
}

// differingKeys names the sub-benchmark keys of best whose values differ
// among the candidates: what picked it ("backend=pytorch-cl").
func differingKeys(best string, candidates []string) string {
	var out []string
	for _, p := range parseKeys(benchfmt.Name(best)) {
		if p.key == "gomaxprocs" {
			continue
		}
		for _, c := range candidates {
			g := &group{keys: parseKeys(benchfmt.Name(c))}
			if g.get(p.key) != p.value {
				out = append(out, keyString(p))
				break
			}
		}
	}
	return strings.Join(out, " ")
}

// bestFigure reads one benchmark file of the record and returns the
// configuration with the best median in unit among those the filter
// selects, and how many configurations it chose from.
func bestFigure(root, file, query, unit string) (figure, int, error) {
	filter, err := benchproc.NewFilter(query)
	if err != nil {
		return figure{}, 0, fmt.Errorf("filter %q: %w", query, err)
	}
	f, err := os.Open(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return figure{}, 0, err
	}
	defer f.Close()
	values := map[string][]float64{}
	hardware := map[string]string{}
	var order []string
	rd := benchfmt.NewReader(f, file)
	for rd.Scan() {
		res, ok := rd.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		if ok, err := filter.Apply(res); err != nil {
			return figure{}, 0, err
		} else if !ok {
			continue
		}
		v, ok := origValue(res, unit)
		if !ok {
			continue
		}
		name := string(res.Name.Full())
		if _, seen := values[name]; !seen {
			order = append(order, name)
			hardware[name] = firstNonEmpty(res.GetConfig("gpu"), res.GetConfig("cpu"))
		}
		values[name] = append(values[name], v)
	}
	if err := rd.Err(); err != nil {
		return figure{}, 0, err
	}
	if len(order) == 0 {
		return figure{}, 0, fmt.Errorf("%s: no result matches %q in %s", file, query, unit)
	}
	var best figure
	for i, name := range order {
		s := summarize(values[name])
		better := s.median > best.median
		if lowerIsBetter(unit) {
			better = s.median < best.median
		}
		if i == 0 || better {
			best = figure{name: name, median: s.median, runs: s.n, hardware: hardware[name]}
		}
	}
	if len(order) > 1 {
		best.differs = differingKeys(best.name, order)
	}
	if best.hardware == "" {
		best.hardware = "not recorded"
	}
	return best, len(order), nil
}

// origValue returns a result's value in the unit as the file spells it
// (benchfmt tidies "p50-latency-ns" into seconds).
func origValue(res *benchfmt.Result, unit string) (float64, bool) {
	for _, v := range res.Values {
		if v.OrigUnit == unit {
			return v.OrigValue, true
		}
		if v.OrigUnit == "" && v.Unit == unit {
			return v.Value, true
		}
	}
	return 0, false
}

// firstNonEmpty returns the first of its arguments that is not empty.
func firstNonEmpty(vs ...string) string {
	if i := slices.IndexFunc(vs, func(v string) bool { return v != "" }); i >= 0 {
		return vs[i]
	}
	return ""
}

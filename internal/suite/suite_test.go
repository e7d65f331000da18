package suite

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchproc"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/loadgen"
	"github.com/inferbench/inferbench/inference/metrics"
)

// parseSuiteFlags validates args as the suite's flags; bench is the -bench
// pattern, benchtime the -benchtime.
func parseSuiteFlags(t *testing.T, gpu func() error, bench, benchtime string, args ...string) (*config, error) {
	t.Helper()
	var f settings
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	require.NoError(t, fs.Parse(args))
	return f.validate(testingFlags{bench: bench, benchtime: benchtime, count: 1}, gpu)
}

func noGPU() error { return fmt.Errorf("%w: no device here", backend.ErrNoGPU) }

func TestFlagErrorsNameTheFlagAndTheRule(t *testing.T) {
	missingDir := filepath.Join(t.TempDir(), "no-such-dir", "out.csv")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"workers 0", []string{"-workers", "0"}, `-workers "0": workers must be at least 1 (got 0)`},
		{"workers word", []string{"-workers", "1,two"}, `-workers "1,two": "two" is not a whole number`},
		{"batches negative", []string{"-batches", "-8"}, `-batches "-8": images per request must be at least 1 (got -8)`},
		{"batches too large", []string{"-batches", "1,5000"}, `-batches "1,5000": 5000 is more than a server takes (4096)`},
		{"workers too many", []string{"-workers", "300"}, `-workers "300": 300 is more than a server takes (256)`},
		{"pipeline", []string{"-pipelines", "serial,pipelined"}, `-pipelines "serial,pipelined": "pipelined" is not one of serial, overlap`},
		{"precision", []string{"-precisions", "bf16"}, `-precisions "bf16": "bf16" is not one of fp32, tf32, fp16`},
		{"graphs", []string{"-graphs", "yes"}, `-graphs "yes": "yes" is not one of on, off`},
		{"loads", []string{"-loads", "poisson"}, `-loads "poisson": "poisson" is not one of burst, closed, open`},
		{"backend", []string{"-backends", "tpu"}, `-backends "tpu": "tpu" is not one of cpu, cuda, nop`},
		{"cuda without a GPU", []string{"-backends", "cuda"}, `-backends "cuda": the cuda back-end cannot run here: backend: no usable GPU`},
		{"concurrency fraction", []string{"-concurrency", "1.5"}, `-concurrency "1.5": requests outstanding must be whole numbers of at least 1 (got 1.5`},
		{"concurrency 0", []string{"-concurrency", "0,4"}, `-concurrency "0,4": requests outstanding must be whole numbers of at least 1 (got 0`},
		{"rate 0", []string{"-rate", "0"}, `-rate "0": requests per second must be positive (got 0)`},
		{"rate range backwards", []string{"-rate", "5000:1000:1000"}, `-rate "5000:1000:1000": range "5000:1000:1000" needs start <= stop and a positive step`},
		{"rate range too long", []string{"-rate", "1:100000:1"}, `range "1:100000:1" has 100000 values (at most 1000)`},
		{"rate two colons", []string{"-rate", "1:2"}, `-rate "1:2": "1:2" is not a number or a start:stop:step range`},
		{"size", []string{"-size", "250"}, `-size "250": want HxW in pixels, such as 250x250`},
		{"size too small", []string{"-size", "8x8"}, `-size "8x8": resnet: input 8x8, want at least`},
		{"model", []string{"-model", "resnet50"}, `-model "resnet50": want resnet18 or tiny`},
		{"checkpoint missing", []string{"-checkpoint", "testdata/none.pt"}, `-checkpoint "testdata/none.pt": open testdata/none.pt`},
		{"seed 0", []string{"-seed", "0"}, `-seed "0": the seed must be at least 1`},
		{"slo percentile", []string{"-slo", "p100=10ms"}, `-slo "p100=10ms": the percentile must be p followed by a number between 0 and 100`},
		{"slo duration", []string{"-slo", "p99=fast"}, `-slo "p99=fast": want PERCENTILE=DURATION such as p99=10ms`},
		{"trial", []string{"-trial", "0s"}, `-trial "0s": a capacity trial must last a positive time`},
		{"window with benchtime", []string{"-window", "2s"}, `-window "2s": windows decide how many requests to send: run with -benchtime 1x (got -benchtime 100x)`},
		{"max windows", []string{"-max-windows", "2"}, `-max-windows "2": at least 3 windows`},
		{"grpc conns", []string{"-grpc-conns", "0"}, `-grpc-conns "0": connections per server must be 1 to 64`},
		{"idle poll", []string{"-idle-poll", "1s"}, `-idle-poll "1s": want 0 to 10ms`},
		{"client poll", []string{"-client-poll", "-1ms"}, `-client-poll "-1ms": want 0 to 10ms`},
		{"batching max", []string{"-batching-max", "2000"}, `-batching-max "2000": want 0 (the rule) to 1024 images`},
		{"batching step", []string{"-batching-step", "-8"}, `-batching-step "-8": want 0 (powers of two) to 1024 images`},
		{"stability", []string{"-stability", "0"}, `-stability "0": the stability percentage must be positive`},
		{"scenario", []string{"-scenarios", "Server,Batch"}, `-scenarios "Server,Batch": "Batch" is not one of SingleStream, MultiStream, Server, Offline`},
		{"csv directory", []string{"-csv", missingDir}, `-csv "` + missingDir + `": the file's directory must exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSuiteFlags(t, noGPU, "Server", "100x", tc.args...)
			var fe *flagError
			require.ErrorAs(t, err, &fe)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestFlagValues(t *testing.T) {
	c, err := parseSuiteFlags(t, noGPU, "Server", "1x", "-rate", "1000:5000:1000,7500", "-concurrency", "1,2,4:16:4",
		"-slo", "p90=5ms", "-window", "2s", "-backends", "auto", "-model", "tiny")
	require.NoError(t, err)
	assert.Equal(t, []float64{1000, 2000, 3000, 4000, 5000, 7500}, c.rates)
	assert.Equal(t, []int{1, 2, 4, 8, 12, 16}, c.conc)
	assert.Equal(t, loadgen.Bound{Quantile: 0.9, Latency: 5 * time.Millisecond}, c.slo)
	assert.Equal(t, "max-rate-p90-5ms-req/s", c.capacityUnit())
	assert.Equal(t, []string{"cpu"}, c.backends, "auto without a GPU")
	require.NotNil(t, c.window)
	assert.Equal(t, 2*time.Second, c.window.Duration)

	// A bare duration is the 99th percentile, as -slo used to take.
	c, err = parseSuiteFlags(t, noGPU, "", "", "-slo", "20ms", "-rate", "0.5:1.5:0.25")
	require.NoError(t, err)
	assert.Equal(t, "max-rate-p99-20ms-req/s", c.capacityUnit())
	assert.Equal(t, []float64{0.5, 0.75, 1, 1.25, 1.5}, c.rates)
	assert.Equal(t, []int{4}, c.concurrencyFor(2), "2 per worker by default")
}

// configText returns the config lines the suite prints with args, followed
// by one result of benchmark line.
func configText(t *testing.T, line string, args ...string) string {
	c, err := parseSuiteFlags(t, noGPU, "Server", "1x", args...)
	require.NoError(t, err)
	var buf bytes.Buffer
	c.printConfig(&buf, nil)
	buf.WriteString(line + "\n")
	return buf.String()
}

// benchstatTables returns the table keys benchstat (whose default is -table
// .config) puts each file's results under.
func benchstatTables(t *testing.T, files map[string]string) map[string]string {
	t.Helper()
	filter, err := benchproc.NewFilter("*")
	require.NoError(t, err)
	var parser benchproc.ProjectionParser
	tables, err := parser.Parse(".config", filter)
	require.NoError(t, err)
	out := map[string]string{}
	for name, text := range files {
		r := benchfmt.NewReader(strings.NewReader(text), name)
		for r.Scan() {
			if res, ok := r.Result().(*benchfmt.Result); ok {
				out[name] = tables.Project(res).String()
			}
		}
		require.NoError(t, r.Err())
	}
	return out
}

func TestBenchstatSplitsUnlikeModels(t *testing.T) {
	const line = "BenchmarkServer/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=burst-2 \t10\t100 ns/op\t5 samples/s"
	tables := benchstatTables(t, map[string]string{
		"resnet18.txt":  configText(t, line, "-model", "resnet18", "-size", "250x250"),
		"tiny.txt":      configText(t, line, "-model", "tiny", "-size", "64x64"),
		"tiny-32.txt":   configText(t, line, "-model", "tiny", "-size", "32x32"),
		"seed-2.txt":    configText(t, line, "-model", "tiny", "-size", "64x64", "-seed", "2"),
		"pinned.txt":    configText(t, line, "-model", "tiny", "-size", "64x64", "-pinned-input"),
		"tiny-bis.txt":  configText(t, line, "-model", "tiny", "-size", "64x64"),
		"windowed.txt":  configText(t, line, "-model", "tiny", "-size", "64x64", "-window", "1s"),
		"constant.txt":  configText(t, line, "-model", "tiny", "-size", "64x64", "-poisson=false"),
		"cold.txt":      configText(t, line, "-model", "tiny", "-size", "64x64", "-cold"),
		"no-window.txt": configText(t, line, "-model", "tiny", "-size", "64x64", "-window", "0"),
		"graph.txt":     configText(t, line, "-model", "tiny", "-size", "64x64", "-convs", "graph"),
		"legacy.txt":    configText(t, line, "-model", "tiny", "-size", "64x64", "-convs", "legacy"),
		"conns-4.txt":   configText(t, line, "-model", "tiny", "-size", "64x64", "-grpc-conns", "4"),
		"conns-1.txt":   configText(t, line, "-model", "tiny", "-size", "64x64", "-grpc-conns", "1"),
		"poll.txt":      configText(t, line, "-model", "tiny", "-size", "64x64", "-idle-poll", "1ms"),
		"poll-0.txt":    configText(t, line, "-model", "tiny", "-size", "64x64", "-idle-poll", "0"),
		"unary.txt":     configText(t, line, "-model", "tiny", "-size", "64x64", "-transports", "grpc"),
		"grpc-go.txt":   configText(t, line, "-model", "tiny", "-size", "64x64", "-transports", "grpc", "-grpc-client", "grpc-go", "-grpc-server", "grpc-go"),
		"h2-server.txt": configText(t, line, "-model", "tiny", "-size", "64x64", "-transports", "grpc", "-grpc-client", "grpc-go"),
		"stream.txt":    configText(t, line, "-model", "tiny", "-size", "64x64", "-transports", "grpc", "-grpc-stream"),
		"cpoll.txt":     configText(t, line, "-model", "tiny", "-size", "64x64", "-transports", "grpc", "-client-poll", "1ms"),
		"cpoll-in.txt":  configText(t, line, "-model", "tiny", "-size", "64x64", "-client-poll", "1ms"),
		"step.txt":      configText(t, line, "-model", "tiny", "-size", "64x64", "-batching-step", "8"),
		"step-0.txt":    configText(t, line, "-model", "tiny", "-size", "64x64", "-batching-step", "0"),
	})
	assert.Equal(t, tables["tiny.txt"], tables["tiny-bis.txt"], "the same setting shares a table")
	assert.Equal(t, tables["tiny.txt"], tables["no-window.txt"])
	// The defaults print no line, so results from before the flags existed
	// share their table.
	assert.Equal(t, tables["tiny.txt"], tables["legacy.txt"])
	assert.Equal(t, tables["tiny.txt"], tables["conns-1.txt"])
	assert.Equal(t, tables["tiny.txt"], tables["poll-0.txt"])
	assert.Equal(t, tables["tiny.txt"], tables["grpc-go.txt"])
	assert.Equal(t, tables["tiny.txt"], tables["step-0.txt"])
	for _, other := range []string{"resnet18.txt", "tiny-32.txt", "seed-2.txt", "pinned.txt", "windowed.txt", "constant.txt", "cold.txt", "graph.txt", "conns-4.txt", "poll.txt", "stream.txt", "cpoll.txt", "cpoll-in.txt", "step.txt", "unary.txt", "h2-server.txt"} {
		assert.NotEqual(t, tables["tiny.txt"], tables[other], "%s must not share the tiny 64x64 table", other)
	}
}

func TestCheckpointConfigLine(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/reference/manifest.json")
	require.NoError(t, err)
	var man struct{ Cases []struct{ Checkpoint string } }
	require.NoError(t, json.Unmarshal(raw, &man))
	require.NotEmpty(t, man.Cases)
	ckpt := filepath.Join("../../testdata/reference", man.Cases[0].Checkpoint)
	c, err := parseSuiteFlags(t, noGPU, "Server", "1x", "-checkpoint", ckpt)
	require.NoError(t, err)
	sum, err := fileSHA256(ckpt)
	require.NoError(t, err)
	lines := map[string]string{}
	for _, kv := range c.configLines() {
		lines[kv.Key] = kv.Value
	}
	assert.Equal(t, filepath.Base(ckpt)+" sha256:"+sum, lines["checkpoint"])
	assert.Equal(t, c.arch.Name(), lines["model"])
	assert.Len(t, sum, 64)

	_, err = parseSuiteFlags(t, noGPU, "Server", "1x", "-checkpoint", ckpt, "-model", "tiny")
	assert.ErrorContains(t, err, `-model "tiny": a -checkpoint brings its own model: give one or the other`)
}

func TestUtilisationOnlyWhenMeasured(t *testing.T) {
	for _, tc := range []struct {
		name string
		u    backend.Utilization
		want []figure
	}{
		{"gpu without a sample", backend.Utilization{Kind: backend.GPUUtilization, Percent: 0, Samples: 0, Busy: 40, HasBusy: true},
			[]figure{{"gpu-util-samples", 0}, {"gpu-busy-pct", 40}}},
		{"gpu sampled", backend.Utilization{Kind: backend.GPUUtilization, Percent: 35, Samples: 12, Busy: 40, HasBusy: true},
			[]figure{{"gpu-util-pct", 35}, {"gpu-util-samples", 12}, {"gpu-busy-pct", 40}}},
		{"process cpu", backend.Utilization{Kind: backend.ProcessCPU, Percent: 80},
			[]figure{{"cpu-util-pct", 80}}},
		{"nothing", backend.Utilization{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, utilFigures(tc.u))
		})
	}
}

func TestCombineUtilWeights(t *testing.T) {
	ws := []loadgen.Window{{Elapsed: time.Second}, {Elapsed: 3 * time.Second}}
	gpu := combineUtil([]backend.Utilization{
		{Kind: backend.GPUUtilization, Percent: 10, Samples: 1, Busy: 20, HasBusy: true},
		{Kind: backend.GPUUtilization, Percent: 50, Samples: 3, Busy: 60, HasBusy: true},
	}, ws)
	assert.Equal(t, 40.0, gpu.Percent, "(10*1 + 50*3) / 4 samples")
	assert.Equal(t, 4, gpu.Samples)
	assert.Equal(t, 50.0, gpu.Busy, "(20*1 s + 60*3 s) / 4 s")
	cpu := combineUtil([]backend.Utilization{{Kind: backend.ProcessCPU, Percent: 10}, {Kind: backend.ProcessCPU, Percent: 30}}, ws)
	assert.Equal(t, 25.0, cpu.Percent, "(10*1 s + 30*3 s) / 4 s")
}

// figureMap returns figs by unit.
func figureMap(figs []figure) map[string]float64 {
	m := map[string]float64{}
	for _, f := range figs {
		m[f.unit] = f.value
	}
	return m
}

func TestWarmupRequestStaysOutOfEveryFigure(t *testing.T) {
	// The server's first inference (compute 0) and the warm-up request
	// (compute 1) take 40 ms each, every later batch 2 ms: no figure of the
	// measured requests may see 40 ms, and the utilisation interval starts
	// after both.
	slowFirst := func(k int) time.Duration {
		if k <= 1 {
			return 40 * time.Millisecond
		}
		return 2 * time.Millisecond
	}
	for _, tc := range []struct {
		name       string
		spec       loadgen.Spec
		window     *loadgen.WindowSpec
		meanLat    time.Duration
		throughput float64
	}{
		// Five requests at once on one worker: answered at 2, 4, ..., 10 ms.
		{"burst", loadgen.Spec{Mode: loadgen.Burst}, nil, 6 * time.Millisecond, 500},
		{"burst asking loadgen for a warm-up too", loadgen.Spec{Mode: loadgen.Burst, Warmup: true}, nil, 6 * time.Millisecond, 500},
		{"closed", loadgen.Spec{Mode: loadgen.Closed, Concurrency: 1}, nil, 2 * time.Millisecond, 500},
		{"open", loadgen.Spec{Mode: loadgen.Open, Rate: 100}, nil, 2 * time.Millisecond, 5 / 0.042},
		{"closed in windows", loadgen.Spec{Mode: loadgen.Closed, Concurrency: 1},
			&loadgen.WindowSpec{Duration: 20 * time.Millisecond, Requests: 3}, 2 * time.Millisecond, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sc := &scripted{compute: slowFirst}
				s := scriptedServer(t, sc, inference.Config{Options: inference.Options{Workers: 1}})
				defer s.Close()
				target := serverTarget{s: s, in: inference.NewInput(1, 32, 32)}
				m, err := measure(context.Background(), inprocView{s}, runSpec{target: target, batch: 1, load: tc.spec, n: 5, window: tc.window})
				require.NoError(t, err)
				figs := figureMap(figures(&m, warmupInfo{known: true, Warmup: s.Warmup()}, -1))
				assert.Equal(t, float64(2*time.Millisecond), figs["compute-ns"], "compute-ns")
				assert.Equal(t, 1.0, figs["mean-batch"])
				assert.Equal(t, float64(tc.meanLat), figs["mean-latency-ns"])
				assert.InEpsilon(t, tc.throughput, figs["samples/s"], 1e-9)
				assert.Equal(t, int64(2), sc.sampledFrom.Load(), "the sampler first starts after the first inference and the warm-up request")
				if tc.window == nil {
					assert.Equal(t, 5, m.whole.Completed, "the warm-up request is not counted")
				} else {
					assert.Equal(t, 3.0, figs["windows"])
					assert.Equal(t, 1.0, figs["stable"])
				}
			})
		})
	}
}

func TestFiguresLeaveOutWhatWasNotMeasured(t *testing.T) {
	m := measurement{batch: 1, mode: loadgen.Burst}
	figs := figureMap(figures(&m, warmupInfo{}, -1))
	for _, unit := range []string{"mean-latency-ns", "p99-latency-ns", "queue-ns", "h2d-ns", "compute-ns", "d2h-ns",
		"mean-batch", "peak-rss-MB", "late-pct", "cpu-util-pct", "gpu-util-pct", "windows", "stable", "ns/op"} {
		_, ok := figs[unit]
		assert.False(t, ok, "%s reported with nothing measured", unit)
	}
	m.mode = loadgen.Open
	m.final.Sent, m.final.Late = 4, 1
	assert.Equal(t, 25.0, figureMap(figures(&m, warmupInfo{}, -1))["late-pct"])
}

func TestPeakRSSForgetsEarlierSubBenchmarks(t *testing.T) {
	if err := metrics.ResetPeakRSS(); err != nil {
		t.Skipf("no peak RSS here: %v", err)
	}
	const mib = 1 << 20
	// An earlier sub-benchmark's 128 MiB, freed before the next one starts.
	big := make([]byte, 128*mib)
	for i := 0; i < len(big); i += 4096 {
		big[i] = 1
	}
	runtime.KeepAlive(big)
	big = nil
	sb := &subBench{}
	sb.beginPeak()
	rss, err := metrics.RSS()
	require.NoError(t, err)
	peak := sb.peakRSS()
	require.Positive(t, peak)
	assert.Less(t, peak, rss+64*mib, "peak %d MiB with %d MiB resident", peak/mib, rss/mib)
}

func TestCSVExportChecksHeadersAndErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rows.csv")
	c, err := openCSV(path, []string{"a", "b"})
	require.NoError(t, err)
	require.NoError(t, c.write([][]string{{"1", "x,y"}}))
	require.NoError(t, c.close())
	c, err = openCSV(path, []string{"a", "b"})
	require.NoError(t, err, "same header: append")
	require.NoError(t, c.write([][]string{{"2", "z"}}))
	require.NoError(t, c.close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "a,b\n1,\"x,y\"\n2,z\n", string(data))

	_, err = openCSV(path, []string{"a", "c"})
	assert.ErrorContains(t, err, "has other columns than this run writes")

	// Write and close errors are returned, naming the file.
	c, err = openCSV(filepath.Join(dir, "broken.csv"), []string{"a"})
	require.NoError(t, err)
	require.NoError(t, c.f.Close()) // the file goes away under the writer
	assert.ErrorContains(t, c.write([][]string{{"1"}}), "writing "+filepath.Join(dir, "broken.csv"))
	assert.ErrorContains(t, c.close(), "broken.csv")
	e := &exporter{rows: c}
	e.write(c, [][]string{{"2"}})
	assert.ErrorContains(t, e.close(), "broken.csv", "the exporter keeps the first error for the end of the run")
}

func TestRequestRowsAndCurveRows(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	run := &exportRun{name: "BenchmarkServer/backend=cpu", reqs: []requestRecord{
		{timing: inference.Timing{ID: 8, Sent: t0.Add(time.Millisecond), Admitted: t0.Add(1100 * time.Microsecond),
			Started: t0.Add(2 * time.Millisecond), Done: t0.Add(5 * time.Millisecond), Queue: 900 * time.Microsecond,
			CopyIn: 100, Compute: 2 * time.Millisecond, CopyOut: 300, Worker: 1, Batch: 4}},
		{timing: inference.Timing{ID: 7, Sent: t0}, err: errors.New("worker 0: compute: lost")},
		{timing: inference.Timing{ID: 9, Sent: t0.Add(2 * time.Millisecond), Done: t0.Add(7 * time.Millisecond)}, remote: true, server: 1},
	}, slo: "p99=10ms", trials: [][]loadgen.Trial{{{Rate: 100, Sent: 200, P50: time.Millisecond, Quantile: 3 * time.Millisecond, OK: true}}}}
	assert.Equal(t, [][]string{
		{"BenchmarkServer/backend=cpu", "2", "7", "0", "", "", "", "", "", "", "", "", "", "", "", "worker 0: compute: lost"},
		{"BenchmarkServer/backend=cpu", "2", "8", "1000000", "1100000", "2000000", "5000000", "900000", "100", "2000000", "300", "false", "1", "4", "", ""},
		// A remote server's request: its send and answer on the suite's
		// clock and the server that answered, no stage left at 0.
		{"BenchmarkServer/backend=cpu", "2", "9", "2000000", "", "", "7000000", "", "", "", "", "", "", "", "1", ""},
	}, requestRows(run, 2))
	assert.Equal(t, [][]string{{"BenchmarkServer/backend=cpu", "2", "1", "p99=10ms", "100.0", "200", "0", "0", "1000000", "3000000", "true"}},
		curveRows(run, 2))
	assert.Len(t, requestsHeader, len(requestRows(run, 1)[0]))
	assert.Len(t, curveHeader, len(curveRows(run, 1)[0]))
}

// suiteBinary runs this test binary's benchmarks with args (tests off) and
// returns its stdout, stderr and exit code.
func suiteBinary(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run", "^$", "-suite-self"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// tinySuite are flags for a fast run of the real suite.
var tinySuite = []string{"-model", "tiny", "-size", "32x32", "-backends", "cpu", "-batches", "1", "-workers", "1", "-pipelines", "serial"}

// results parses benchmark output: each result's name and its values by unit.
func results(t *testing.T, out string) []*benchfmt.Result {
	t.Helper()
	var rs []*benchfmt.Result
	r := benchfmt.NewReader(strings.NewReader(out), "out")
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.Result:
			rs = append(rs, rec.Clone())
		case *benchfmt.SyntaxError:
			t.Errorf("output line does not parse: %v", rec)
		}
	}
	require.NoError(t, r.Err())
	return rs
}

// nameOf returns a result's full name without its GOMAXPROCS suffix.
func nameOf(r *benchfmt.Result) string {
	base, parts := r.Name.Parts()
	name := string(base)
	for _, p := range parts {
		if p[0] == '/' {
			name += string(p)
		}
	}
	return name
}

// lookup returns r's value in unit as printed (benchfmt turns "ns" units
// into "sec" ones and keeps the original).
func lookup(r *benchfmt.Result, unit string) (float64, bool) {
	for _, v := range r.Values {
		switch unit {
		case v.OrigUnit:
			return v.OrigValue, true
		case v.Unit:
			return v.Value, true
		}
	}
	return 0, false
}

func value(t *testing.T, r *benchfmt.Result, unit string) float64 {
	t.Helper()
	v, ok := lookup(r, unit)
	require.True(t, ok, "%s has no %s", r.Name.Full(), unit)
	return v
}

func TestSuiteBinaryStopsOnAFlagErrorOnce(t *testing.T) {
	stdout, stderr, code := suiteBinary(t, "-test.bench", "Server", "-test.benchtime", "1x", "-workers", "0", "-model", "tiny")
	assert.Equal(t, 2, code)
	assert.Equal(t, 1, strings.Count(stderr, "workers must be at least 1"), "stderr: %s", stderr)
	assert.NotContains(t, stdout, "Benchmark")
	assert.NotContains(t, stdout, "PASS")
}

func TestSuiteBinaryRefusesCUDAWithoutAGPU(t *testing.T) {
	if gpuAvailable() == nil {
		t.Skip("a GPU is usable here")
	}
	stdout, stderr, code := suiteBinary(t, "-test.bench", "Server", "-test.benchtime", "1x", "-backends", "cuda", "-model", "tiny")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `-backends "cuda": the cuda back-end cannot run here: `)
	assert.NotContains(t, stdout, "PASS")
}

func TestSuiteBinaryMeasuresWarmupEveryRun(t *testing.T) {
	dir := t.TempDir()
	csvPath, reqPath := filepath.Join(dir, "rows.csv"), filepath.Join(dir, "requests.csv")
	stdout, stderr, code := suiteBinary(t, append([]string{"-test.bench", "Server$", "-test.benchtime", "3x", "-test.count", "3",
		"-csv", csvPath, "-requests", reqPath}, tinySuite...)...)
	require.Zero(t, code, "stderr: %s", stderr)
	rs := results(t, stdout)
	require.Len(t, rs, 3)
	var warm, first []float64
	for _, r := range rs {
		warm = append(warm, value(t, r, "warmup-ns"))
		first = append(first, value(t, r, "first-ns"))
		assert.Positive(t, value(t, r, "peak-rss-MB"))
	}
	// One server per run: three warm-ups measured, not one printed thrice.
	assert.False(t, warm[0] == warm[1] && warm[1] == warm[2], "warmup-ns %v", warm)
	assert.False(t, first[0] == first[1] && first[1] == first[2], "first-ns %v", first)

	rows := readCSV(t, csvPath)
	require.Len(t, rows, 4, "header and one row per run")
	assert.Equal(t, csvHeader(), rows[0])
	col := func(name string) int { return index(t, rows[0], name) }
	for i, row := range rows[1:] {
		assert.Equal(t, strconv.Itoa(i+1), row[col("run")])
		assert.Equal(t, "cpu", row[col("backend")])
		assert.Equal(t, "burst", row[col("load")])
		assert.Equal(t, "tiny", row[col("model")])
		assert.Equal(t, "32x32", row[col("size")])
		assert.Equal(t, "3", row[col("requests")])
		got, err := strconv.ParseFloat(row[col("warmup-ns")], 64)
		require.NoError(t, err)
		assert.Equal(t, warm[i], got, "the CSV has the printed figures of run %d", i+1)
	}
	reqs := readCSV(t, reqPath)
	require.Len(t, reqs, 1+3*3, "header and three requests per run")
	assert.Equal(t, requestsHeader, reqs[0])

	// For people, on stderr: the sub-benchmark started, and the summary of
	// its three runs.
	name := "Server/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=burst/transport=inproc"
	assert.Contains(t, stderr, "[1/1] Benchmark"+name+"\n")
	_, summary, ok := strings.Cut(stderr, "summary (the mean of each configuration's runs):\n")
	require.True(t, ok, "stderr: %s", stderr)
	lines := strings.Split(strings.TrimSpace(summary), "\n")
	require.Len(t, lines, 2, summary)
	assert.Equal(t, []string{"configuration", "runs", "samples/s", "p50", "p99"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{name, "3"}, strings.Fields(lines[1])[:2])
	assert.NotContains(t, stdout, "summary", "benchstat's input stays as it was")
	// go test writes the binary's stderr into its stdout: mixed in, the
	// progress and the summary must change no result nor its config.
	mixed := results(t, stderr+stdout)
	require.Len(t, mixed, len(rs))
	for i, r := range mixed {
		assert.Equal(t, rs[i].Config, r.Config, "the config lines of %s", nameOf(r))
	}
}

func TestSuiteBinaryWindowsAndLoadRanges(t *testing.T) {
	stdout, stderr, code := suiteBinary(t, append([]string{"-test.bench", "Server$", "-test.benchtime", "1x",
		"-loads", "closed,open", "-concurrency", "1:2:1", "-rate", "200,400", "-window", "20ms", "-window-requests", "3", "-max-windows", "4"}, tinySuite...)...)
	require.Zero(t, code, "stderr: %s", stderr)
	rs := results(t, stdout)
	var names []string
	for _, r := range rs {
		names = append(names, strings.TrimPrefix(nameOf(r), "Server"))
		windows := value(t, r, "windows")
		assert.GreaterOrEqual(t, windows, 3.0)
		assert.LessOrEqual(t, windows, 4.0)
		stable := value(t, r, "stable")
		assert.True(t, stable == 0 || stable == 1)
		assert.InEpsilon(t, 1e9/value(t, r, "req/s"), value(t, r, "ns/op"), 1e-3, "ns/op (printed to 4 digits) is the windows' time per request")
	}
	assert.Equal(t, []string{
		"/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=closed/concurrency=1/transport=inproc",
		"/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=closed/concurrency=2/transport=inproc",
		"/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=open/rate=200/transport=inproc",
		"/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=open/rate=400/transport=inproc",
	}, names)
	assert.Contains(t, stdout, "window: 20ms requests=3 stability=5% compare=throughput,p50 max=4\n")
}

func TestSuiteBinaryScenarios(t *testing.T) {
	stdout, stderr, code := suiteBinary(t, append([]string{"-test.bench", "Scenario", "-test.benchtime", "4x",
		"-scenarios", "SingleStream,Server,Offline", "-rate", "50", "-slo", "p99=1s"}, tinySuite...)...)
	require.Zero(t, code, "stderr: %s", stderr)
	rs := results(t, stdout)
	got := map[string]*benchfmt.Result{}
	for _, r := range rs {
		got[nameOf(r)] = r
	}
	single := got["Scenario/scenario=SingleStream/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1"]
	server := got["Scenario/scenario=Server/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/rate=50"]
	offline := got["Scenario/scenario=Offline/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1"]
	require.NotNil(t, single, "names: %v", keys(got))
	require.NotNil(t, server, "names: %v", keys(got))
	require.NotNil(t, offline, "names: %v", keys(got))
	value(t, single, "p90-latency-ns")
	assert.Equal(t, 1.0, value(t, server, "valid"), "a tiny model at 50 queries/s keeps p99 within 1 s")
	_, judged := lookup(single, "valid")
	assert.False(t, judged, "SingleStream has no verdict")
	value(t, offline, "samples/s")
	assert.Contains(t, stdout, "Server at 50 queries/s: p99 latency")
	assert.Contains(t, stdout, "(bound 1s): VALID")
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	return rows
}

func index(t *testing.T, header []string, name string) int {
	t.Helper()
	for i, h := range header {
		if h == name {
			return i
		}
	}
	t.Fatalf("no column %q in %v", name, header)
	return -1
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

package inferbench_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/loadgen"
	"github.com/inferbench/inferbench/inference/metrics"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/inference/trace"
)

// The benchmark matrix. Each flag takes a comma-separated list; BenchmarkServer
// runs every combination as a key=value sub-benchmark.
var (
	flagBackends   = flag.String("backends", "auto", "back-ends: cpu, cuda; auto = cuda when a GPU is usable, else cpu")
	flagBatches    = flag.String("batches", "", "images per request (default 1,8 on cpu; 1,32,256 on cuda)")
	flagWorkers    = flag.String("workers", "", "compute workers (default 1,2)")
	flagPipelines  = flag.String("pipelines", "serial,overlap", "serial, overlap")
	flagPrecisions = flag.String("precisions", "", "fp32, tf32, fp16 (default fp32 on cpu; fp32,tf32 on cuda)")
	flagGraphs     = flag.String("graphs", "off", "CUDA graphs: on, off")
	flagDevices    = flag.String("devices", "1", "GPUs to spread workers over (cuda)")
	flagLoads      = flag.String("loads", "burst", "load: burst, closed, open")
	flagConc       = flag.Int("concurrency", 0, "closed loop: requests outstanding (0 = 2 per worker)")
	flagRate       = flag.Float64("rate", 100, "open loop: requests per second")
	flagPoisson    = flag.Bool("poisson", true, "open loop: Poisson arrivals (false = constant gaps)")
	flagCheckpoint = flag.String("checkpoint", "", "model checkpoint (.pt/.pth/.safetensors); empty = seeded ResNet-18")
	flagModel      = flag.String("model", "resnet18", "embedded model when there is no checkpoint: resnet18 or tiny")
	flagSize       = flag.String("size", "250x250", "input HxW in pixels")
	flagPinned     = flag.Bool("pinned-input", false, "set Config.PinnedInput: the suite's inputs come from AllocInput, so the cuda back-end needs no staging buffers (shorter warm-up)")
	flagSeed       = flag.Uint64("seed", 1, "seed of the embedded model and of the inputs")
	flagSLO        = flag.Duration("slo", 10*time.Millisecond, "capacity search: p99 latency objective")
	flagTrial      = flag.Duration("trial", time.Second, "capacity search: length of each trial")
	flagDelay      = flag.Duration("max-queue-delay", time.Millisecond, "capacity search with batching=on: MaxQueueDelay")
	flagCurve      = flag.String("curve", "", "capacity search: append every trial (rate, p50, p99) to this CSV file")
	flagTrace      = flag.String("timeline", "", "write a Chrome trace (JSON) of each BenchmarkServer run here; {name} in the path becomes the sub-benchmark's name, otherwise the last run's trace is kept")
)

// Units tells benchstat and the regression gate which way is better.
var units = []struct{ name, better string }{
	{"samples/s", "higher"}, {"req/s", "higher"},
	{"mean-latency-ns", "lower"}, {"std-latency-ns", "lower"}, {"min-latency-ns", "lower"}, {"max-latency-ns", "lower"},
	{"p50-latency-ns", "lower"}, {"p90-latency-ns", "lower"}, {"p99-latency-ns", "lower"}, {"p999-latency-ns", "lower"},
	{"warmup-ns", "lower"}, {"load-ns", "lower"}, {"setup-ns", "lower"}, {"first-ns", "lower"},
	{"queue-ns", "lower"}, {"h2d-ns", "lower"}, {"compute-ns", "lower"}, {"d2h-ns", "lower"},
	{"cpu-util-pct", "higher"}, {"gpu-util-pct", "higher"}, {"gpu-busy-pct", "higher"},
	{"late-pct", "lower"}, {"mean-batch", "higher"},
}

// capacityUnit is the metric of BenchmarkCapacity for the current -slo.
func capacityUnit() string {
	return fmt.Sprintf("max-rate-p99-%v-req/s", *flagSLO)
}

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		printConfig()
	}
	os.Exit(m.Run())
}

// printConfig writes the config lines that keep results from different
// machines apart. (Commit and date are left to scripts/sweep: lines that differ
// between any two runs would split benchstat's before/after tables.)
func printConfig() {
	fmt.Printf("backend: %s\n", strings.Join(backends(), ","))
	fmt.Printf("gomaxprocs: %d\n", runtime.GOMAXPROCS(0))
	for _, kv := range deviceConfig() {
		fmt.Printf("%s: %s\n", kv.Key, kv.Value)
	}
	for _, u := range units {
		fmt.Printf("Unit %s better=%s\n", u.name, u.better)
	}
	fmt.Printf("Unit %s better=higher\n", capacityUnit())
}

var gpu struct {
	once sync.Once
	kv   []backend.KV
	err  error
}

// gpuAvailable reports whether the cuda back-end can run here.
func gpuAvailable() error {
	gpu.once.Do(func() { gpu.kv, gpu.err = inference.DescribeGPU() })
	return gpu.err
}

// deviceConfig returns the GPU's config lines, or none.
func deviceConfig() []backend.KV {
	if gpuAvailable() != nil {
		return nil
	}
	return gpu.kv
}

func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func ints(tb testing.TB, s string) []int {
	var out []int
	for _, f := range list(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			tb.Fatalf("bad number %q in %q", f, s)
		}
		out = append(out, n)
	}
	return out
}

func backends() []string {
	if *flagBackends != "auto" {
		return list(*flagBackends)
	}
	if gpuAvailable() == nil {
		return []string{"cuda"}
	}
	return []string{"cpu"}
}

func orDefault(v, cpu, gpu, be string) string {
	if v != "" {
		return v
	}
	if be == "cuda" {
		return gpu
	}
	return cpu
}

func inputSize(tb testing.TB) (int, int) {
	h, w, ok := strings.Cut(*flagSize, "x")
	hh, err1 := strconv.Atoi(h)
	ww, err2 := strconv.Atoi(w)
	if !ok || err1 != nil || err2 != nil {
		tb.Fatalf("bad -size %q, want HxW", *flagSize)
	}
	return hh, ww
}

func benchModel(tb testing.TB) *resnet.Model {
	if *flagCheckpoint != "" {
		return nil // the server loads it, and times the load
	}
	arch := resnet.ResNet18()
	if *flagModel == "tiny" {
		arch = resnet.Tiny()
	} else if *flagModel != "resnet18" {
		tb.Fatalf("unknown -model %q (want resnet18 or tiny)", *flagModel)
	}
	m, err := resnet.New(arch, *flagSeed)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkServer measures the server end to end: one b.N iteration is one
// request of batch images sent under the chosen load; ns/op is wall time per
// request including the final drain, so it is 1/(requests per second).
func BenchmarkServer(b *testing.B) {
	h, w := inputSize(b)
	for _, be := range backends() {
		for _, batch := range ints(b, orDefault(*flagBatches, "1,8", "1,32,256", be)) {
			for _, workers := range ints(b, orDefault(*flagWorkers, "1,2", "1,2", be)) {
				for _, pipe := range list(*flagPipelines) {
					for _, prec := range list(orDefault(*flagPrecisions, "fp32", "fp32,tf32", be)) {
						for _, graphs := range list(*flagGraphs) {
							for _, devices := range ints(b, *flagDevices) {
								for _, load := range list(*flagLoads) {
									name := fmt.Sprintf("backend=%s/batch=%d/workers=%d/pipeline=%s/precision=%s/graphs=%s/devices=%d/load=%s",
										be, batch, workers, pipe, prec, graphs, devices, load)
									b.Run(name, func(b *testing.B) {
										cfg := serverConfig(b, be, batch, workers, pipe, prec, graphs, devices, h, w)
										if *flagTrace != "" {
											cfg.Trace = trace.New()
										}
										s := serverFor(b, name, cfg)
										benchServer(b, s, batch, load)
										if t := s.Config().Trace; t != nil {
											if err := t.WriteFile(traceFile(name)); err != nil {
												b.Fatal(err)
											}
										}
									})
									if s, ok := servers.LoadAndDelete(name); ok {
										s.(*inference.Server).Close()
									}
								}
							}
						}
					}
				}
			}
		}
	}
}

func serverConfig(b *testing.B, be string, batch, workers int, pipe, prec, graphs string, devices, h, w int) inference.Config {
	p, err := backend.ParsePipeline(pipe)
	if err != nil {
		b.Fatal(err)
	}
	pr, err := backend.ParsePrecision(prec)
	if err != nil {
		b.Fatal(err)
	}
	if graphs != "on" && graphs != "off" {
		b.Fatalf("bad graphs value %q, want on or off", graphs)
	}
	devs := make([]int, devices)
	for i := range devs {
		devs[i] = i
	}
	return inference.Config{
		Device: be, Model: benchModel(b), Checkpoint: *flagCheckpoint,
		Height: h, Width: w, MaxBatch: batch, Batches: []int{batch},
		Workers: workers, Pipeline: p, Precision: pr, Graphs: graphs == "on", Devices: devs,
		MaxQueue: 4096, PinnedInput: *flagPinned,
	}
}

// traceFile is where the -trace of the sub-benchmark name goes.
func traceFile(name string) string {
	return strings.ReplaceAll(*flagTrace, "{name}", strings.NewReplacer("/", "_", "=", "-").Replace(name))
}

// servers keeps one server per configuration across the b.N ramp-up calls of
// a sub-benchmark, so each is built (and its warm-up measured) once.
var servers sync.Map

func serverFor(b *testing.B, key string, cfg inference.Config) *inference.Server {
	if s, ok := servers.Load(key); ok {
		return s.(*inference.Server)
	}
	s, err := inference.New(cfg)
	if err != nil {
		if gpuAvailable() != nil && cfg.Device == "cuda" {
			b.Skipf("cuda back-end: %v", err)
		}
		b.Fatal(err)
	}
	servers.Store(key, s)
	printInfo(s.Info().Config)
	return s
}

// printed holds the back-end config lines already printed.
var printed sync.Map

// printInfo prints a back-end's config lines the first time each value is seen
// (config lines apply to the benchmark lines after them).
func printInfo(kvs []backend.KV) {
	for _, kv := range kvs {
		if old, ok := printed.Swap(kv.Key, kv.Value); !ok || old != kv.Value {
			fmt.Printf("%s: %s\n", kv.Key, kv.Value)
		}
	}
}

func benchServer(b *testing.B, s *inference.Server, batch int, load string) {
	mode, err := loadgen.ParseMode(load)
	if err != nil {
		b.Fatal(err)
	}
	spec := loadgen.Spec{Mode: mode, Warmup: mode == loadgen.Burst, Rate: *flagRate, Poisson: *flagPoisson, Seed: *flagSeed}
	if mode == loadgen.Closed {
		spec.Concurrency = *flagConc
		if spec.Concurrency == 0 {
			spec.Concurrency = 2 * s.Config().Workers
		}
	}
	in, err := s.AllocInput(batch)
	if err != nil {
		b.Fatal(err)
	}
	defer s.FreeInput(in)
	rng := rand.New(rand.NewPCG(*flagSeed, 99))
	for i := range in.Data {
		in.Data[i] = float32(rng.NormFloat64())
	}

	ctx := context.Background()
	if mode != loadgen.Burst {
		// One request outside the measurement, as burst does.
		if _, err := s.Infer(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	s.ResetStats()
	if t := s.Config().Trace; t != nil {
		t.Reset()
	}
	before := s.Stats()
	sampler := s.Sampler()
	if sampler != nil {
		if err := sampler.Start(); err != nil {
			b.Fatal(err)
		}
	}
	gen, err := loadgen.Start(ctx, s.Target(in), spec)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := gen.Next(); err != nil {
			b.Fatal(err)
		}
	}
	res := gen.Finish()
	b.StopTimer()
	var util backend.Utilization
	if sampler != nil {
		if util, err = sampler.Stop(); err != nil {
			b.Fatal(err)
		}
	}
	if res.Failed > 0 {
		b.Fatalf("%d of %d requests failed: %v", res.Failed, res.Sent, res.Errs)
	}
	report(b, s, &res, batch, mode, util, before, s.Stats())
}

func report(b *testing.B, s *inference.Server, res *loadgen.Result, batch int, mode loadgen.Mode, util backend.Utilization, before, after inference.Stats) {
	lat := res.Latency.Summary()
	b.ReportMetric(res.Throughput(batch), "samples/s")
	b.ReportMetric(res.Throughput(1), "req/s")
	for _, m := range []struct {
		d    time.Duration
		unit string
	}{
		{lat.Mean, "mean-latency-ns"}, {lat.Std, "std-latency-ns"}, {lat.Min, "min-latency-ns"}, {lat.Max, "max-latency-ns"},
		{lat.P50, "p50-latency-ns"}, {lat.P90, "p90-latency-ns"}, {lat.P99, "p99-latency-ns"}, {lat.P999, "p999-latency-ns"},
	} {
		b.ReportMetric(float64(m.d), m.unit)
	}
	w := s.Warmup()
	b.ReportMetric(float64(w.Total()), "warmup-ns")
	b.ReportMetric(float64(w.Load), "load-ns")
	b.ReportMetric(float64(w.Setup), "setup-ns")
	b.ReportMetric(float64(w.First), "first-ns")
	st := after.Recorded.Stages
	b.ReportMetric(float64(st[metrics.Queue].Mean), "queue-ns")
	b.ReportMetric(float64(st[metrics.CopyIn].Mean), "h2d-ns")
	b.ReportMetric(float64(st[metrics.Compute].Mean), "compute-ns")
	b.ReportMetric(float64(st[metrics.CopyOut].Mean), "d2h-ns")
	if util.Name != "" {
		b.ReportMetric(util.Percent, util.Name)
	}
	if util.HasBusy {
		b.ReportMetric(util.Busy, "gpu-busy-pct")
	}
	if mode == loadgen.Open {
		b.ReportMetric(100*res.LateShare(), "late-pct")
	}
	if n := after.Batches - before.Batches; n > 0 {
		b.ReportMetric(float64(after.Items-before.Items)/float64(n), "mean-batch")
	}
}

// BenchmarkServerOverhead measures what the server itself costs per request:
// the zero-cost nop back-end, batch-1 requests of a 32x32 image, clients
// goroutines each sending one request at a time; batching=on puts the dynamic
// batcher in the path (sending at once, as a batch of one is full), trace=on
// records every batch's timeline.
func BenchmarkServerOverhead(b *testing.B) {
	for _, workers := range []int{1, 2} {
		for _, clients := range []int{1, 4} {
			for _, batching := range []string{"off", "on"} {
				for _, tracing := range []string{"off", "on"} {
					name := fmt.Sprintf("workers=%d/clients=%d/batching=%s/trace=%s", workers, clients, batching, tracing)
					b.Run(name, func(b *testing.B) {
						cfg := inference.Config{Backend: nop.New(), Model: benchTiny(b), Height: 32, Width: 32, MaxBatch: 1, Workers: workers}
						if batching == "on" {
							cfg.MaxQueueDelay = time.Millisecond
						}
						if tracing == "on" {
							cfg.Trace = trace.New()
						}
						benchOverhead(b, cfg, clients)
					})
				}
			}
		}
	}
}

func benchTiny(b *testing.B) *resnet.Model {
	m, err := resnet.New(resnet.Tiny(), 1)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func benchOverhead(b *testing.B, cfg inference.Config, clients int) {
	s, err := inference.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var next atomic.Int64
	hists := make([]metrics.Histogram, clients)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := inference.NewInput(1, 32, 32)
			out := make([]float32, s.Classes())
			ctx := context.Background()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				call, err := s.Submit(ctx, inference.Request{Input: in, Logits: out})
				if err == nil {
					err = call.Err()
				}
				if err != nil {
					b.Error(err)
					return
				}
				hists[c].Record(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all metrics.Histogram
	for i := range hists {
		all.Merge(&hists[i])
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(all.Quantile(0.5)), "p50-latency-ns")
	b.ReportMetric(float64(all.Quantile(0.99)), "p99-latency-ns")
}

// BenchmarkCapacity searches for the highest rate of batch-1 requests (open
// loop, Poisson arrivals) whose p99 latency stays within -slo, with and
// without dynamic batching, on the overlap pipeline with the first of
// -precisions and -graphs. One iteration is one whole search: run it with
// -benchtime 1x and repeat with -count.
func BenchmarkCapacity(b *testing.B) {
	if f := flag.Lookup("test.bench"); f == nil || !strings.Contains(f.Value.String(), "Capacity") {
		b.Skip("a capacity search takes tens of seconds per configuration: name it to run it (-bench Capacity -benchtime 1x)")
	}
	h, w := inputSize(b)
	for _, be := range backends() {
		for _, workers := range ints(b, orDefault(*flagWorkers, "1,2", "1,2", be)) {
			for _, batching := range []string{"off", "on"} {
				name := fmt.Sprintf("backend=%s/workers=%d/batching=%s", be, workers, batching)
				b.Run(name, func(b *testing.B) {
					prec := list(orDefault(*flagPrecisions, "fp32", "fp32", be))[0]
					cfg := serverConfig(b, be, 1, workers, "overlap", prec, list(*flagGraphs)[0], 1, h, w)
					if batching == "on" {
						// Prepared sizes in powers of two: a merged batch runs padded
						// to at most twice its size, never planned on the request path.
						cfg.MaxBatch, cfg.Batches = 64, []int{1, 2, 4, 8, 16, 32, 64}
						cfg.MaxQueueDelay = *flagDelay
					}
					s := serverFor(b, name, cfg)
					in, err := s.AllocInput(1)
					if err != nil {
						b.Fatal(err)
					}
					defer s.FreeInput(in)
					var rates []float64
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						c, err := loadgen.SearchCapacity(context.Background(), s.Target(in), loadgen.CapacitySpec{SLO: *flagSLO, Trial: *flagTrial, Seed: *flagSeed + uint64(i)})
						if err != nil {
							b.Fatal(err)
						}
						rates = append(rates, c.Rate)
						writeCurve(b, name, c)
					}
					b.StopTimer()
					var sum float64
					for _, r := range rates {
						sum += r
					}
					b.ReportMetric(sum/float64(len(rates)), capacityUnit())
				})
				if s, ok := servers.LoadAndDelete(name); ok {
					s.(*inference.Server).Close()
				}
			}
		}
	}
}

// writeCurve appends the trials of one search to the -curve file.
func writeCurve(b *testing.B, name string, c loadgen.Capacity) {
	if *flagCurve == "" {
		return
	}
	f, err := os.OpenFile(*flagCurve, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for _, t := range c.Trials {
		fmt.Fprintf(f, "%s,%.1f,%d,%d,%d,%d,%t\n", name, t.Rate, t.Sent, t.Late, t.P50.Nanoseconds(), t.Quantile.Nanoseconds(), t.OK)
	}
}

package suite

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/loadgen"
	"github.com/inferbench/inferbench/inference/metrics"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/inference/trace"
)

// Register defines the suite's flags on fs: flag.CommandLine in a test
// binary, before testing parses it.
func Register(fs *flag.FlagSet) { flagValues.register(fs) }

// Main is a test binary's TestMain: it validates every flag before anything
// runs (an invalid one is printed once, naming the flag and its rule, and
// exits 2), prints the config and Unit lines when benchmarks run, runs m and
// closes the export files at the end. It returns the exit code.
func Main(m *testing.M) int {
	flag.Parse()
	tf := testingFlags{bench: flagValue("test.bench"), benchtime: flagValue("test.benchtime")}
	if f := flag.Lookup("test.count"); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			tf.count, _ = g.Get().(uint)
		}
	}
	gpuCheck := gpuAvailable
	if tf.bench == "" {
		gpuCheck = nil // no benchmark will run: whether cuda could is moot
	}
	var err error
	if conf, err = flagValues.validate(tf, gpuCheck); err != nil {
		fmt.Fprintf(os.Stderr, "inferbench: %v\n", err)
		return 2
	}
	if tf.bench != "" {
		if err := conf.begin(); err != nil {
			fmt.Fprintf(os.Stderr, "inferbench: %v\n", err)
			return 2
		}
	}
	code := m.Run()
	if err := end(); err != nil {
		fmt.Fprintf(os.Stderr, "inferbench: %v\n", err)
		code = max(code, 1)
	}
	return code
}

// flagValue returns the value of a registered flag, or "".
func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// Server is BenchmarkServer: it measures the server end to end. Without
// -window, one b.N iteration is one request of batch images under the chosen
// load, and ns/op is the wall time per request including the final drain (1 /
// req/s); with -window (and -benchtime 1x) the windows decide the requests,
// and every figure covers the last three windows. The transport, last in the
// name, says how requests reach the server: inproc calls an in-process server;
// grpc, http, grpc-shm and http-shm go over loopback to `inferbench serve`
// processes the suite starts (servers= of them at once), or to -target.
func Server(b *testing.B) { runSubs(b, "Server") }

// serverSub is BenchmarkServer's sub-benchmark of point p.
func (c *config) serverSub(prefix string, p point) (sub, error) {
	var cfg inference.Config
	if !p.remote {
		var err error
		if cfg, err = c.pointConfig(p); err != nil {
			return sub{}, err
		}
	}
	spec := c.loadSpec(p)
	sb := subBenchFor(prefix+"/"+p.name, cfg)
	sb.input = p.input
	if p.transport != inproc {
		sb.wire = &wireSpec{transport: p.transport, servers: p.servers, p: p}
		if p.load == loadgen.Closed {
			sb.wire.outstanding = p.conc
		}
	}
	return sub{name: p.name, sb: sb, run: func(b runB) { runServer(b, sb, p.batch, spec, nil) }}, nil
}

// runServer measures one call of a sub-benchmark on its run's server(s) and
// reports the figures; extra, if set, adds figures of its own.
func runServer(b runB, sb *subBench, batch int, spec loadgen.Spec, extra func(*measurement) []figure) {
	var log *requestLog
	if exports != nil && exports.reqs != nil {
		log = &requestLog{}
	}
	start := func() {
		log.clear() // the warm-up request is not exported
		b.ResetTimer()
	}
	rs := runSpec{batch: batch, load: spec, n: b.iterations(), window: conf.window, start: start, stop: b.StopTimer}
	var (
		view    serverView
		warm    warmupInfo
		peakRSS func() int64
		failed  func() string // more about failed requests
		after   func() error
	)
	if sb.wire == nil {
		s := sb.server(b)
		in, err := s.AllocInput(batch)
		if err != nil {
			b.Fatal(err)
		}
		defer s.FreeInput(in)
		rng := rand.New(rand.NewPCG(conf.flags.shared.Seed, 99))
		for i := range in.Data {
			in.Data[i] = float32(rng.NormFloat64())
		}
		if sb.input == "uint8" {
			// Bytes in the first quarter of the same (on cuda: pinned) memory.
			in = inference.Tensor{Shape: in.Shape, Datatype: inference.Uint8, Bytes: randomBytes(floatBytes(in.Data)[:len(in.Data)], conf.flags.shared.Seed)}
		}
		rs.target = serverTarget{s: s, in: in, log: log, poll: conf.flags.clientPoll}
		view, warm, peakRSS = inprocView{s}, warmupInfo{known: true, Warmup: s.Warmup()}, sb.peakRSS
		failed = func() string { return "" }
		after = func() error {
			if t := s.Config().Trace; t != nil {
				return t.WriteFile(traceFile(b.Name()))
			}
			return nil
		}
	} else {
		f := sb.fleet(b)
		rs.target, rs.warm = fleetTarget{f: f, log: log, ids: new(atomic.Uint64)}, f.warmUp
		view, warm, peakRSS, failed = f, f.warmup(), f.peakRSS, f.describe
		if f.utilNote != "" && !f.noted {
			b.Log(f.utilNote)
			f.noted = true
		}
		after = func() error {
			if f.shm != nil {
				if n := f.shm.slots.sharedSlots(); n > 0 {
					b.Logf("%d requests wrote their outputs into a shared-memory slot in use: more were in flight than the %d slots", n, f.shm.slots.n)
				}
			}
			return nil
		}
	}
	m, err := measure(context.Background(), view, rs)
	if err != nil {
		b.Fatal(err, failed())
	}
	if m.whole.Failed > 0 {
		b.Fatalf("%d of %d requests failed: %v%s", m.whole.Failed, m.whole.Sent, m.whole.Errs, failed())
	}
	figs := figures(&m, warm, peakRSS())
	if extra != nil {
		figs = append(figs, extra(&m)...)
	}
	for _, f := range figs {
		b.ReportMetric(f.value, f.unit)
	}
	run := &exportRun{name: b.Name(), figs: figs, n: m.final.Completed, answered: m.answered}
	if log != nil {
		run.reqs = log.recs
	}
	sb.last = run
	if err := after(); err != nil {
		b.Fatal(err)
	}
}

// traceFile is where the -timeline of the benchmark called name goes.
func traceFile(name string) string {
	_, sub, _ := strings.Cut(name, "/")
	return strings.ReplaceAll(conf.flags.timeline, "{name}", strings.NewReplacer("/", "_", "=", "-").Replace(sub))
}

// matrix returns the sub-benchmarks of benchmark bench (Server, Scenario,
// ServerOverhead, Capacity), or why it runs none.
func (c *config) matrix(bench string) ([]point, string) {
	switch bench {
	case "Server":
		return c.expand(serverDims, c.start()), ""
	case "ServerOverhead":
		return c.expand(overheadDims, point{}), ""
	case "Scenario":
		if !strings.Contains(c.bench, "Scenario") {
			return nil, "scenarios run only when named (-bench Scenario)"
		}
	case "Capacity":
		if !strings.Contains(c.bench, "Capacity") {
			return nil, "a capacity search takes tens of seconds per configuration: name it to run it (-bench Capacity -benchtime 1x)"
		}
	default:
		return nil, "no benchmark " + bench
	}
	if len(c.targets) > 0 {
		return nil, "-target drives BenchmarkServer only"
	}
	if bench == "Scenario" {
		return c.expand(scenarioDims, c.start()), ""
	}
	return c.expand(capacityDims, c.start()), ""
}

// Scenario is BenchmarkScenario: it runs MLPerf LoadGen's scenarios
// (-scenarios) over the server matrix: SingleStream (one 1-image query at a
// time; p90 latency), MultiStream (one 8-image query at a time; p99 latency),
// Server (1-image queries with Poisson arrivals at each -rate; VALID when the
// -slo percentile latency is within its bound), Offline (all queries at once,
// -batches images each; samples/s). It runs only when named: -bench Scenario.
func Scenario(b *testing.B) { runSubs(b, "Scenario") }

// scenarioSub is BenchmarkScenario's sub-benchmark of point p.
func (c *config) scenarioSub(prefix string, p point) (sub, error) {
	sc, r := p.scenario, p.rate
	cfg, err := c.pointConfig(p)
	if err != nil {
		return sub{}, err
	}
	sb := subBenchFor(prefix+"/"+p.name, cfg)
	sb.input = p.input
	return sub{name: p.name, sb: sb, run: func(b runB) {
		runServer(b, sb, p.batch, sc.Load(r, c.flags.shared.Seed), func(m *measurement) []figure {
			o := sc.Judge(&m.final, p.batch, c.slo)
			if b.iterations() > 1 || c.benchtime == "1x" {
				b.Log(describeOutcome(o, r, c.slo))
			}
			if !o.Judged {
				return nil
			}
			valid := 0.0
			if o.Valid {
				valid = 1
			}
			return []figure{{"valid", valid}}
		})
	}}, nil
}

// describeOutcome states a scenario's result as LoadGen's summary does.
func describeOutcome(o loadgen.Outcome, rate float64, slo loadgen.Bound) string {
	switch o.Scenario {
	case loadgen.Offline:
		return fmt.Sprintf("Offline: %.1f samples/s", o.Throughput)
	case loadgen.Server:
		return fmt.Sprintf("Server at %s queries/s: %s latency %v (bound %v): %s",
			formatRate(rate), percentileName(o.Quantile), o.Latency, slo.Latency, o.Verdict())
	}
	return fmt.Sprintf("%s: %s latency %v", o.Scenario, percentileName(o.Quantile), o.Latency)
}

// ServerOverhead is BenchmarkServerOverhead: it measures what the server
// itself costs per request: the zero-cost nop back-end, batch-1 requests of a
// 32x32 image, clients goroutines each sending one request at a time;
// batching=on puts the dynamic batcher in the path (sending at once, as a
// batch of one is full), trace=on records every batch's timeline.
func ServerOverhead(b *testing.B) { runSubs(b, "ServerOverhead") }

// overheadSub is BenchmarkServerOverhead's sub-benchmark of point p; it
// needs testing's allocation counts, so only go test runs it.
func overheadSub(p point) sub {
	return sub{name: p.name, bench: func(b *testing.B) {
		cfg := inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 1, Workers: p.workers}, Backend: nop.New(), Model: benchTiny(b)}
		if p.batching == "on" {
			cfg.MaxQueueDelay = time.Millisecond
		}
		if p.trace == "on" {
			cfg.Trace = trace.New()
		}
		benchOverhead(b, cfg, p.clients)
	}}
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

// Capacity is BenchmarkCapacity: it searches for the highest rate of requests
// (open loop, Poisson arrivals, -batches images each, 1 by default) whose -slo
// percentile latency stays within its bound, with and without dynamic
// batching, on the overlap pipeline with the first of -precisions and -graphs.
// One iteration is one whole search: run it with -benchtime 1x and repeat with
// -count. It runs only when named: -bench Capacity.
func Capacity(b *testing.B) { runSubs(b, "Capacity") }

// capacitySub is BenchmarkCapacity's sub-benchmark of point p: on the
// overlap pipeline with the first of -precisions and -graphs.
func (c *config) capacitySub(prefix string, p point) (sub, error) {
	q := p
	q.pipe, q.prec, q.graphs, q.devices = "overlap", c.precisionsFor(p.be)[0], c.graphs[0], 1
	cfg, err := c.pointConfig(q)
	if err != nil {
		return sub{}, err
	}
	sb := subBenchFor(prefix+"/"+p.name, cfg)
	return sub{name: p.name, sb: sb, run: func(b runB) { runCapacity(b, sb, p.batch) }}, nil
}

// batchingSizes returns MaxBatch and the prepared batch sizes of a server
// that merges batch-image requests: merged batches of up to limit images, or
// with limit 0 max(64, 8*batch) (at most 1024), prepared at batch times
// powers of two and at MaxBatch, so a merged batch runs padded to at most
// twice its size and is never planned on the request path. A positive step
// (-batching-step) also prepares every multiple of step that whole requests
// fill, so a merged batch runs padded by less than step images.
func batchingSizes(batch, limit, step int) (int, []int) {
	maxBatch := limit
	if maxBatch == 0 {
		maxBatch = min(1024, max(64, 8*batch))
	}
	maxBatch = max(maxBatch, batch)
	var sizes []int
	for n := batch; n <= maxBatch; n *= 2 {
		sizes = append(sizes, n)
	}
	if step > 0 {
		for n := step; n <= maxBatch; n += step {
			if n >= batch && n%batch == 0 {
				sizes = append(sizes, n)
			}
		}
	}
	sizes = append(sizes, maxBatch)
	slices.Sort(sizes)
	return maxBatch, slices.Compact(sizes)
}

// runCapacity runs b.N capacity searches and reports their mean.
func runCapacity(b runB, sb *subBench, batch int) {
	s := sb.server(b)
	in, err := s.AllocInput(batch)
	if err != nil {
		b.Fatal(err)
	}
	defer s.FreeInput(in)
	t := serverTarget{s: s, in: in, poll: conf.flags.clientPoll}
	if err := warmUp(context.Background(), t); err != nil {
		b.Fatal(err)
	}
	run := &exportRun{name: b.Name(), slo: percentileName(conf.slo.Quantile) + "=" + conf.slo.Latency.String()}
	var sum float64
	b.ResetTimer()
	n := b.iterations()
	for i := range n {
		c, err := loadgen.SearchCapacity(context.Background(), t, loadgen.CapacitySpec{
			SLO: conf.slo.Latency, Quantile: conf.slo.Quantile, Trial: conf.flags.trial, Seed: conf.flags.shared.Seed + uint64(i)})
		if err != nil {
			b.Fatal(err)
		}
		sum += c.Rate
		run.trials = append(run.trials, c.Trials)
	}
	b.StopTimer()
	mean := sum / float64(n)
	b.ReportMetric(mean, conf.capacityUnit())
	run.figs = []figure{{"max-rate-req/s", mean}}
	sb.last = run
}

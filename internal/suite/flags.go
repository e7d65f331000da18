package suite

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/checkpoint"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/loadgen"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/internal/serverflag"
)

// settings are the suite's command-line flags as given. Lists are
// comma-separated; -concurrency and -rate also take start:stop:step ranges.
type settings struct {
	backends, batches, workers, pipelines, precisions, graphs, devices, loads string
	concurrency, rate                                                         string
	poisson                                                                   bool
	shared                                                                    serverflag.Flags // the flags serve takes too
	pinned, cold, grpcStream                                                  bool
	slo                                                                       string
	trial, delay, clientPoll                                                  time.Duration
	curve, timeline, csv, requests                                            string
	window                                                                    time.Duration
	windowRequests, maxWindows                                                int
	grpcConns, batchingMax, batchingStep                                      int
	stability                                                                 float64
	scenarios                                                                 string
	transports, serveBin, servers                                             string
	grpcClient                                                                string
	inputs, batching                                                          string
	targets                                                                   targetList
	targetCA                                                                  string

	fs *flag.FlagSet // where they were registered
}

// targetList is -target: URLs, the flag repeated or comma-separated.
type targetList []string

func (l *targetList) String() string { return strings.Join(*l, ",") }

func (l *targetList) Set(s string) error {
	*l = append(*l, list(s)...)
	return nil
}

// register defines the flags on fs.
func (f *settings) register(fs *flag.FlagSet) {
	f.fs = fs
	f.shared.Register(fs, "also of the inputs and the Poisson arrivals",
		"gRPC transports: the one the suite starts (a config line when h2grpc)")
	serverflag.Backend.RegisterList(fs, &f.backends, "auto", "auto = cuda when a GPU is usable, else cpu")
	serverflag.Batches.RegisterList(fs, &f.batches, "", "the suite's requests carry that many images each (default 1,8 on cpu; 1,32,256 on cuda)")
	serverflag.Workers.RegisterList(fs, &f.workers, "", "(default 1,2)")
	serverflag.Pipeline.RegisterList(fs, &f.pipelines, "serial,overlap", "")
	serverflag.Precision.RegisterList(fs, &f.precisions, "", "(default fp32 on cpu; fp32,tf32 on cuda)")
	serverflag.Graphs.RegisterList(fs, &f.graphs, "off", "on or off")
	serverflag.Devices.RegisterList(fs, &f.devices, "1", "how many: the first N")
	fs.StringVar(&f.loads, FlagLoads, "burst", "load: burst, closed, open")
	fs.StringVar(&f.concurrency, FlagConcurrency, "", "closed loop: requests outstanding, a list or start:stop:step range such as 1,2,4 or 1:16:1 (default 2 per worker)")
	fs.StringVar(&f.rate, FlagRate, "100", "open loop and the Server scenario: requests per second, a list or start:stop:step range such as 1000:20000:1000")
	fs.BoolVar(&f.poisson, "poisson", true, "open loop: Poisson arrivals (false = constant gaps)")
	serverflag.PinnedInput.Bool(fs, &f.pinned, false, "the suite's inputs come from there (a shorter warm-up)")
	fs.BoolVar(&f.cold, "cold", false, "start every server with an empty algorithm cache (cuda), so every -count run measures a cold warm-up")
	fs.StringVar(&f.slo, "slo", "p99=10ms", "latency objective PERCENTILE=DURATION (p99=10ms, p90=5ms; a bare duration means p99): the capacity search's, and the Server scenario's bound")
	fs.DurationVar(&f.trial, "trial", time.Second, "capacity search: length of each trial")
	serverflag.MaxQueueDelay.Duration(fs, &f.delay, time.Millisecond, "batching=on (-batching's, and the capacity search's)")
	fs.StringVar(&f.curve, "curve", "", "capacity search: append every trial (rate, sent, failed, late, p50, the -slo percentile, ok) to this CSV file")
	fs.StringVar(&f.timeline, "timeline", "", "write a Chrome trace (JSON) of each BenchmarkServer run here; {name} in the path becomes the sub-benchmark's name, otherwise the last run's trace is kept")
	fs.StringVar(&f.csv, "csv", "", "append one row per measured configuration and -count run (every dimension, config setting and figure) to this CSV file")
	fs.StringVar(&f.requests, "requests", "", "append one row per measured request (send, admit, start and done times, stage times) to this CSV file")
	fs.DurationVar(&f.window, "window", 0, "measure in windows of at least this long until the last three agree (0 = off; needs -benchtime 1x)")
	fs.IntVar(&f.windowRequests, "window-requests", 50, "windows: responses each window holds at least")
	fs.Float64Var(&f.stability, "stability", loadgen.DefaultStability, "windows: largest spread of the last three windows' throughput and median latency, in percent")
	fs.IntVar(&f.maxWindows, "max-windows", loadgen.DefaultMaxWindows, "windows: stop after this many, stable or not")
	fs.DurationVar(&f.clientPoll, "client-poll", 0, "how long the suite's clients look for an answer before they sleep: a wire transport's connections for the server's next bytes, an in-process caller for its call's answer (busy CPUs on the client's side, as -idle-poll on the server's; 0: sleep at once; at most 10ms); a config line when set")
	fs.BoolVar(&f.grpcStream, "grpc-stream", false, "gRPC transports: send requests as messages of one ModelStreamInfer call per connection (Triton's streaming inference, as perf_analyzer --streaming) instead of a ModelInfer call each; a config line when set")
	fs.StringVar(&f.grpcClient, "grpc-client", client.TransportH2, "gRPC transports: the client's transport for ModelInfer calls: h2grpc (this module's own HTTP/2 client: requests written from the caller's memory) or grpc-go (-grpc-stream always uses grpc-go); a config line when h2grpc")
	fs.IntVar(&f.grpcConns, "grpc-conns", 1, "gRPC transports: connections to each server, each request on one with the fewest in flight (one connection has one writer, which a few large requests keep busy)")
	fs.StringVar(&f.scenarios, FlagScenarios, "SingleStream,MultiStream,Server,Offline", "BenchmarkScenario: MLPerf LoadGen scenarios to run")
	fs.StringVar(&f.transports, FlagTransports, "", "BenchmarkServer: how requests reach the server: inproc (Server.Submit in this process), or over loopback to an `inferbench serve` process the suite starts: grpc, http, grpc-shm, http-shm (system shared memory), grpc-cudashm, http-cudashm (CUDA shared memory: -backends cuda, a -tags cuda suite) (default inproc; with -target, the URL's scheme)")
	fs.StringVar(&f.serveBin, "serve-bin", "", "the inferbench binary the wire transports start (default: built once with go build ./cmd/inferbench, with -tags cuda when this binary has it)")
	fs.Var(&f.targets, "target", "drive running v2 servers instead of starting any: grpc://host:port or http://host:port (grpcs:// or https:// over TLS), repeated or comma-separated (several are driven at once, least outstanding requests first)")
	fs.StringVar(&f.targetCA, "target-ca", "", "grpcs:// and https:// targets: a PEM file of the CA certificates to trust, or insecure to skip verification (default: the system's roots)")
	fs.StringVar(&f.inputs, FlagInput, "", "input datatypes: fp32, uint8 (image bytes, normalised on the GPU by cuda, on the host by cpu); names carry input=X when given")
	fs.StringVar(&f.batching, FlagBatching, "", "BenchmarkServer: dynamic batching off, on (the server merges queued requests into batches of up to max(64, 8*batch) images, waiting at most -max-queue-delay); names carry batching=X when given (default off, unnamed)")
	fs.IntVar(&f.batchingMax, "batching-max", 0, "batching=on: the largest merged batch in images (0: max(64, 8*batch), at most 1024); a config line when set")
	fs.IntVar(&f.batchingStep, "batching-step", 0, "batching=on: also prepare (plans, graphs) every multiple of this many images up to the largest merged batch, so a merged batch runs padded by fewer images (0: the request batch times powers of two, and the largest); a config line when set")
	fs.StringVar(&f.servers, FlagServers, "", "server processes to start and drive at once, a list such as 1,2 (wire transports; each its own GPUs on cuda); names carry servers=N when given")
}

// testingFlags are the testing package's flags the suite depends on.
type testingFlags struct {
	bench, benchtime string
	count            uint
}

// config is the validated setting of one run (of the test binary, or of
// the bench command).
type config struct {
	flags *settings

	backends   []string // "auto" resolved
	batches    []int    // nil: per back-end default
	workers    []int    // nil: 1,2
	pipelines  []string
	precisions []string // nil: per back-end default
	inputs     []string // nil: -input not given (float32, no input= in names)
	batching   []string // nil: -batching not given (off, no batching= in names)
	graphs     []string
	devices    []int
	loads      []loadgen.Mode
	conc       []int // nil: 2 per worker
	rates      []float64
	scenarios  []loadgen.Scenario

	arch       resnet.Arch // the seeded model, or the checkpoint's
	model      string      // its name for the model: line
	checkpoint string      // the checkpoint: line ("none" or NAME sha256:HEX)
	h, w       int
	slo        loadgen.Bound
	window     *loadgen.WindowSpec // nil: windows off
	count      uint                // -test.count
	bench      string              // -test.bench: Scenario and Capacity run only when it names them
	benchtime  string              // -test.benchtime

	transports []string     // BenchmarkServer's transports
	servers    []int        // nil: -servers not given (one server, no servers= in names)
	targets    []target     // -target: servers to drive instead of starting any
	targetTLS  *tls.Config  // -target and -target-ca: the targets' TLS; nil: plaintext
	remote     *remoteModel // -target: what the targets said of the model (probeTargets)
}

// Transports.
const (
	inproc  = "inproc"
	grpcT   = "grpc"
	httpT   = "http"
	grpcSHM = "grpc-shm"
	httpSHM = "http-shm"
	// The CUDA shared-memory transports put tensors in the suite's GPU
	// memory, which the server (cuda) copies device to device.
	grpcCudaSHM = "grpc-cudashm"
	httpCudaSHM = "http-cudashm"
)

// shmTransport reports whether tr puts tensors in system shared memory.
func shmTransport(tr string) bool { return strings.HasSuffix(tr, "-shm") }

// cudaSHMTransport reports whether tr puts tensors in CUDA shared memory.
func cudaSHMTransport(tr string) bool { return strings.HasSuffix(tr, "-cudashm") }

// target is one -target URL: its protocol (grpc or http) and address.
type target struct {
	url, scheme, addr string
	local             bool // the host is this machine (loopback or one of its addresses)
	tls               bool // grpcs:// or https://
}

// flagError is an invalid flag value: the flag, its value and the rule.
type flagError struct {
	name, value, rule string
}

func (e *flagError) Error() string { return fmt.Sprintf("-%s %q: %s", e.name, e.value, e.rule) }

func badFlag(name, value, format string, args ...any) error {
	return &flagError{name: name, value: value, rule: fmt.Sprintf(format, args...)}
}

// validate checks every flag and returns the setting, or the first invalid
// flag with its rule. gpu says whether the cuda back-end can run here (nil)
// or why not; a nil gpu means no benchmark will run: -backends is only
// checked for its spelling and auto means cpu.
func (f *settings) validate(tf testingFlags, gpu func() error) (*config, error) {
	c := &config{flags: f, count: tf.count, bench: tf.bench, benchtime: tf.benchtime}
	var err error
	if c.backends, err = resolveBackends(f.backends, gpu); err != nil {
		return nil, err
	}
	if c.batches, err = positiveInts(serverflag.Batches.List, f.batches, "images per request"); err != nil {
		return nil, err
	}
	if c.workers, err = positiveInts(serverflag.Workers.List, f.workers, "workers"); err != nil {
		return nil, err
	}
	for _, l := range []struct {
		name, value string
		vals        []int
		limit       int
	}{{serverflag.Batches.List, f.batches, c.batches, inference.LimitMaxBatch}, {serverflag.Workers.List, f.workers, c.workers, inference.LimitWorkers}} {
		for _, n := range l.vals {
			if n > l.limit {
				return nil, badFlag(l.name, l.value, "%d is more than a server takes (%d)", n, l.limit)
			}
		}
	}
	if c.devices, err = positiveInts(serverflag.Devices.List, f.devices, "devices"); err != nil {
		return nil, err
	}
	if len(c.devices) == 0 {
		return nil, badFlag(serverflag.Devices.List, f.devices, "give at least one device count")
	}
	if c.pipelines, err = split(serverflag.Pipeline, f.pipelines); err != nil {
		return nil, err
	}
	if c.precisions, err = split(serverflag.Precision, f.precisions); err != nil {
		return nil, err
	}
	if c.graphs, err = split(serverflag.Graphs, f.graphs); err != nil {
		return nil, err
	}
	if err := serverflag.Convs.Check(f.shared.Convs); err != nil {
		return nil, badFlag(serverflag.Convs.Name, f.shared.Convs, "%v", err)
	}
	if f.grpcConns < 1 || f.grpcConns > 64 {
		return nil, badFlag("grpc-conns", strconv.Itoa(f.grpcConns), "connections per server must be 1 to 64")
	}
	if c.inputs, err = oneOf("input", f.inputs, "fp32", "uint8"); err != nil {
		return nil, err
	}
	if f.isSet("input") && len(c.inputs) == 0 {
		return nil, badFlag("input", f.inputs, "give at least one of fp32, uint8")
	}
	if f.batchingMax < 0 || f.batchingMax > 1024 {
		return nil, badFlag("batching-max", strconv.Itoa(f.batchingMax), "want 0 (the rule) to 1024 images")
	}
	if f.batchingStep < 0 || f.batchingStep > 1024 {
		return nil, badFlag("batching-step", strconv.Itoa(f.batchingStep), "want 0 (powers of two) to 1024 images")
	}
	if c.batching, err = oneOf("batching", f.batching, "off", "on"); err != nil {
		return nil, err
	}
	if f.isSet("batching") && len(c.batching) == 0 {
		return nil, badFlag("batching", f.batching, "give at least one of off, on")
	}
	if len(c.pipelines) == 0 || len(c.graphs) == 0 {
		return nil, fmt.Errorf("-%s and -%s need at least one value each", serverflag.Pipeline.List, serverflag.Graphs.List)
	}
	loads, err := oneOf("loads", f.loads, "burst", "closed", "open")
	if err != nil {
		return nil, err
	}
	if len(loads) == 0 {
		return nil, badFlag("loads", f.loads, "give at least one of burst, closed, open")
	}
	for _, l := range loads {
		m, _ := loadgen.ParseMode(l)
		c.loads = append(c.loads, m)
	}
	if c.conc, err = concurrencies(f.concurrency); err != nil {
		return nil, err
	}
	if c.rates, err = rates(f.rate); err != nil {
		return nil, err
	}
	if f.shared.Seed == 0 {
		return nil, badFlag(serverflag.Seed.Name, "0", "the seed must be at least 1 (0 means the default seed to inference.Config)")
	}
	if err := c.setModel(f); err != nil {
		return nil, err
	}
	if c.h, c.w, err = inputSize(f.shared.Size); err != nil {
		return nil, err
	}
	if c.slo, err = parseSLO(f.slo); err != nil {
		return nil, err
	}
	if f.trial <= 0 {
		return nil, badFlag("trial", f.trial.String(), "a capacity trial must last a positive time")
	}
	if f.delay <= 0 {
		return nil, badFlag(serverflag.MaxQueueDelay.Name, f.delay.String(), "batching=on needs a positive MaxQueueDelay")
	}
	if err := serverflag.CheckIdlePoll(f.shared.IdlePoll); err != nil {
		return nil, badFlag(serverflag.IdlePoll.Name, f.shared.IdlePoll.String(), "%v", err)
	}
	if f.grpcClient != client.TransportH2 && f.grpcClient != client.TransportGRPCGo {
		return nil, badFlag("grpc-client", f.grpcClient, "want %s or %s", client.TransportH2, client.TransportGRPCGo)
	}
	if err := serverflag.GRPCServer.Check(f.shared.GRPCServer); err != nil {
		return nil, badFlag(serverflag.GRPCServer.Name, f.shared.GRPCServer, "%v", err)
	}
	if f.clientPoll < 0 || f.clientPoll > inference.MaxIdlePoll {
		return nil, badFlag("client-poll", f.clientPoll.String(), "want 0 to %v", inference.MaxIdlePoll)
	}
	if c.window, err = windowSpec(f, tf); err != nil {
		return nil, err
	}
	names, err := oneOf("scenarios", f.scenarios, "SingleStream", "MultiStream", "Server", "Offline")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		s, _ := loadgen.ParseScenario(n)
		c.scenarios = append(c.scenarios, s)
	}
	if err := c.setTransports(f, tf); err != nil {
		return nil, err
	}
	for _, out := range []struct{ name, path string }{{"curve", f.curve}, {"csv", f.csv}, {"requests", f.requests}, {"timeline", f.timeline}} {
		if out.path == "" {
			continue
		}
		if st, err := os.Stat(filepath.Dir(out.path)); err != nil || !st.IsDir() {
			return nil, badFlag(out.name, out.path, "the file's directory must exist")
		}
	}
	return c, nil
}

// resolveBackends checks -backends and resolves auto.
func resolveBackends(s string, gpu func() error) ([]string, error) {
	if s == "auto" {
		if gpu != nil && gpu() == nil {
			return []string{"cuda"}, nil
		}
		return []string{"cpu"}, nil
	}
	names, err := split(serverflag.Backend, s)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, badFlag(serverflag.Backend.List, s, "give %s or auto", strings.Join(serverflag.Backend.Values, ", "))
	}
	if slices.Contains(names, "cuda") && gpu != nil {
		if err := gpu(); err != nil {
			return nil, badFlag(serverflag.Backend.List, s, "the cuda back-end cannot run here: %v", err)
		}
	}
	return names, nil
}

// list splits a comma-separated flag value, dropping empty items.
func list(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// oneOf checks that every item of s is one of allowed.
func oneOf(name, s string, allowed ...string) ([]string, error) {
	items := list(s)
	for _, it := range items {
		if !slices.Contains(allowed, it) {
			return nil, badFlag(name, s, "%q is not one of %s", it, strings.Join(allowed, ", "))
		}
	}
	return items, nil
}

// split splits the value v of setting s's list flag and checks its items.
func split(s *serverflag.Setting, v string) ([]string, error) {
	items, err := s.Split(v)
	if err != nil {
		return nil, badFlag(s.List, v, "%v", err)
	}
	return items, nil
}

// positiveInts parses a list of integers of at least 1 (what names them in
// the rule).
func positiveInts(name, s, what string) ([]int, error) {
	var out []int
	for _, it := range list(s) {
		n, err := strconv.Atoi(it)
		if err != nil {
			return nil, badFlag(name, s, "%q is not a whole number", it)
		}
		if n < 1 {
			return nil, badFlag(name, s, "%s must be at least 1 (got %d)", what, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// maxRangeValues bounds the values one range flag expands to.
const maxRangeValues = 1000

// floatValues parses a comma-separated list whose items are numbers or
// start:stop:step ranges (stop included when the steps land on it).
func floatValues(name, s string) ([]float64, error) {
	var out []float64
	for _, it := range list(s) {
		parts := strings.Split(it, ":")
		nums := make([]float64, len(parts))
		for i, p := range parts {
			v, err := strconv.ParseFloat(p, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, badFlag(name, s, "%q is not a number or a start:stop:step range", it)
			}
			nums[i] = v
		}
		switch len(nums) {
		case 1:
			out = append(out, nums[0])
		case 3:
			start, stop, step := nums[0], nums[1], nums[2]
			if !(step > 0) || stop < start {
				return nil, badFlag(name, s, "range %q needs start <= stop and a positive step", it)
			}
			n := int(math.Floor((stop-start)/step+1e-9)) + 1
			if n > maxRangeValues {
				return nil, badFlag(name, s, "range %q has %d values (at most %d)", it, n, maxRangeValues)
			}
			for i := range n {
				out = append(out, start+float64(i)*step)
			}
		default:
			return nil, badFlag(name, s, "%q is not a number or a start:stop:step range", it)
		}
	}
	return out, nil
}

// concurrencies parses -concurrency: whole numbers of at least 1, or nothing
// (2 per worker).
func concurrencies(s string) ([]int, error) {
	vals, err := floatValues("concurrency", s)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, v := range vals {
		if v != math.Trunc(v) || v < 1 {
			return nil, badFlag("concurrency", s, "requests outstanding must be whole numbers of at least 1 (got %v; leave it empty for 2 per worker)", v)
		}
		out = append(out, int(v))
	}
	return out, nil
}

// rates parses -rate: positive requests per second.
func rates(s string) ([]float64, error) {
	vals, err := floatValues("rate", s)
	if err != nil {
		return nil, err
	}
	if len(vals) == 0 {
		return nil, badFlag("rate", s, "give at least one rate")
	}
	for _, v := range vals {
		if !(v > 0) {
			return nil, badFlag("rate", s, "requests per second must be positive (got %v)", v)
		}
	}
	return vals, nil
}

// inputSize parses -size HxW.
func inputSize(s string) (int, int, error) {
	h, w, err := serverflag.ParseSize(s)
	if err != nil {
		return 0, 0, badFlag(serverflag.Size.Name, s, "%v", err)
	}
	return h, w, nil
}

// parseSLO parses -slo: PERCENTILE=DURATION (p99=10ms) or a bare duration
// (the 99th percentile).
func parseSLO(s string) (loadgen.Bound, error) {
	pct, dur, ok := strings.Cut(s, "=")
	if !ok {
		pct, dur = "p99", s
	}
	d, err := time.ParseDuration(dur)
	if err != nil || d <= 0 {
		return loadgen.Bound{}, badFlag("slo", s, "want PERCENTILE=DURATION such as p99=10ms, with a positive duration")
	}
	p, err := strconv.ParseFloat(strings.TrimPrefix(pct, "p"), 64)
	if !strings.HasPrefix(pct, "p") || err != nil || !(p > 0 && p < 100) {
		return loadgen.Bound{}, badFlag("slo", s, "the percentile must be p followed by a number between 0 and 100, such as p99 or p99.9")
	}
	return loadgen.Bound{Quantile: p / 100, Latency: d}, nil
}

// percentileName returns "p99", "p90", "p99.9" for a quantile.
func percentileName(q float64) string {
	return "p" + strconv.FormatFloat(q*100, 'f', -1, 64)
}

// windowSpec checks the window flags; nil when -window is 0.
func windowSpec(f *settings, tf testingFlags) (*loadgen.WindowSpec, error) {
	switch {
	case f.window < 0:
		return nil, badFlag("window", f.window.String(), "a window must last a positive time (0 turns windows off)")
	case f.windowRequests < 1:
		return nil, badFlag("window-requests", strconv.Itoa(f.windowRequests), "a window must hold at least 1 response")
	case !(f.stability > 0):
		return nil, badFlag("stability", strconv.FormatFloat(f.stability, 'g', -1, 64), "the stability percentage must be positive")
	case f.maxWindows < 3:
		return nil, badFlag("max-windows", strconv.Itoa(f.maxWindows), "at least 3 windows (stability compares the last three)")
	case f.window == 0:
		return nil, nil
	case tf.bench != "" && tf.benchtime != "1x":
		return nil, badFlag("window", f.window.String(), "windows decide how many requests to send: run with -benchtime 1x (got -benchtime %s)", tf.benchtime)
	}
	return &loadgen.WindowSpec{Duration: f.window, Requests: f.windowRequests, Stability: f.stability, MaxWindows: f.maxWindows}, nil
}

// setModel checks -model and -checkpoint and fills arch, model and
// checkpoint.
func (c *config) setModel(f *settings) error {
	c.checkpoint = "none"
	if f.shared.Checkpoint == "" {
		var err error
		if c.arch, err = serverflag.Arch(f.shared.Model); err != nil {
			return badFlag(serverflag.Model.Name, f.shared.Model, "%v", err)
		}
		c.model = f.shared.Model
		return nil
	}
	if f.isSet(serverflag.Model.Name) {
		return badFlag(serverflag.Model.Name, f.shared.Model, "a -checkpoint brings its own model: give one or the other")
	}
	sum, err := fileSHA256(f.shared.Checkpoint)
	if err != nil {
		return badFlag(serverflag.Checkpoint.Name, f.shared.Checkpoint, "%v", err)
	}
	m, err := checkpoint.LoadResNet(f.shared.Checkpoint)
	if err != nil {
		return badFlag(serverflag.Checkpoint.Name, f.shared.Checkpoint, "%v", err)
	}
	c.arch, c.model = m.Arch, m.Arch.Name()
	c.checkpoint = filepath.Base(f.shared.Checkpoint) + " sha256:" + sum
	return nil
}

// isSet reports whether the flag was given on the command line.
func (f *settings) isSet(name string) bool {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// fileSHA256 returns the hex SHA-256 of a file's content.
func fileSHA256(path string) (string, error) {
	r, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// batchesFor returns the batch sizes for back-end be.
func (c *config) batchesFor(be string) []int {
	switch {
	case c.batches != nil:
		return c.batches
	case be == "cuda":
		return []int{1, 32, 256}
	}
	return []int{1, 8}
}

// workerCounts returns the worker counts.
func (c *config) workerCounts() []int {
	if c.workers != nil {
		return c.workers
	}
	return []int{1, 2}
}

// precisionsFor returns the precisions for back-end be.
func (c *config) precisionsFor(be string) []string {
	switch {
	case c.precisions != nil:
		return c.precisions
	case be == "cuda":
		return []string{"fp32", "tf32"}
	}
	return []string{"fp32"}
}

// concurrencyFor returns the closed loop's concurrencies for a server with
// workers workers.
func (c *config) concurrencyFor(workers int) []int {
	if c.conc != nil {
		return c.conc
	}
	return []int{2 * workers}
}

// capacityUnit is BenchmarkCapacity's metric for the -slo in force, such as
// max-rate-p99-10ms-req/s.
func (c *config) capacityUnit() string {
	return fmt.Sprintf("max-rate-%s-%v-req/s", percentileName(c.slo.Quantile), c.slo.Latency)
}

// formatRate writes a rate for a benchmark name: 1000, 1500.5.
func formatRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

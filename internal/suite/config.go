package suite

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/cuda"
	"github.com/inferbench/inferbench/inference/protocol"
)

// The units the suite reports, with the direction that is better, printed as
// "Unit NAME better=..." lines for benchstat and the regression gate. The
// README's units table says what each measures.
var units = []struct{ name, better string }{
	{"samples/s", "higher"}, {"req/s", "higher"},
	{"mean-latency-ns", "lower"}, {"std-latency-ns", "lower"}, {"min-latency-ns", "lower"}, {"max-latency-ns", "lower"},
	{"p50-latency-ns", "lower"}, {"p90-latency-ns", "lower"}, {"p99-latency-ns", "lower"}, {"p999-latency-ns", "lower"},
	{"warmup-ns", "lower"}, {"load-ns", "lower"}, {"setup-ns", "lower"}, {"first-ns", "lower"}, {"start-ns", "lower"},
	{"queue-ns", "lower"}, {"h2d-ns", "lower"}, {"compute-ns", "lower"}, {"d2h-ns", "lower"},
	{"cpu-util-pct", "higher"}, {"gpu-util-pct", "higher"}, {"gpu-util-samples", "higher"}, {"gpu-busy-pct", "higher"},
	{"late-pct", "lower"}, {"mean-batch", "higher"}, {"peak-rss-MB", "lower"},
	{"windows", "lower"}, {"stable", "higher"}, {"valid", "higher"},
}

// configLines returns the suite's own config lines: every setting that
// changes a number and is not a dimension of the benchmark names. Lines that
// differ make benchstat and the gate keep results apart.
func (c *config) configLines() []backend.KV {
	f := c.flags
	if len(c.targets) > 0 {
		return c.targetLines()
	}
	lines := []backend.KV{
		{Key: "backend", Value: strings.Join(c.backends, ",")},
		{Key: "gomaxprocs", Value: strconv.Itoa(runtime.GOMAXPROCS(0))},
		{Key: "model", Value: c.model},
		{Key: "size", Value: fmt.Sprintf("%dx%d", c.h, c.w)},
		{Key: "checkpoint", Value: c.checkpoint},
		{Key: "seed", Value: strconv.FormatUint(f.shared.Seed, 10)},
		{Key: "pinned-input", Value: strconv.FormatBool(f.pinned)},
		{Key: "poisson", Value: strconv.FormatBool(f.poisson)},
		{Key: "window", Value: c.windowLine()},
		{Key: "cold-start", Value: strconv.FormatBool(f.cold)},
	}
	// Every result before -convs existed ran the legacy path: only the graph
	// path gets a line, so that those results still compare.
	if f.shared.Convs != backend.ConvsLegacy.String() {
		lines = append(lines, backend.KV{Key: "convs", Value: f.shared.Convs})
	}
	// Every result before -idle-poll existed slept at once: only a set
	// value gets a line.
	if f.shared.IdlePoll > 0 {
		lines = append(lines, backend.KV{Key: "idle-poll", Value: f.shared.IdlePoll.String()})
	}
	// Every result before -batching-max existed merged by batchingSizes' rule.
	if f.batchingMax > 0 {
		lines = append(lines, backend.KV{Key: "batching-max", Value: strconv.Itoa(f.batchingMax)})
	}
	if f.batchingStep > 0 {
		lines = append(lines, backend.KV{Key: "batching-step", Value: strconv.Itoa(f.batchingStep)})
	}
	// Every result before -grpc-server existed was served by grpc-go.
	if c.grpcWire() && f.shared.GRPCServer != protocol.GRPCServerGo {
		lines = append(lines, backend.KV{Key: "grpc-server", Value: f.shared.GRPCServer})
	}
	return append(lines, c.clientLines()...)
}

// grpcWire reports whether a transport of the run speaks gRPC.
func (c *config) grpcWire() bool {
	return slices.ContainsFunc(c.transports, func(tr string) bool { return schemeOf(tr) == grpcT })
}

// clientLines are the suite's clients' config lines, each only when it differs
// from what every earlier result used: grpc-conns when the suite opens more
// than one connection per gRPC server, grpc-stream when requests go as
// messages of ModelStreamInfer calls rather than ModelInfer calls,
// grpc-client when ModelInfer calls go through h2grpc rather than grpc-go,
// client-poll when the connections' reads (HTTP's too) look before they
// sleep.
func (c *config) clientLines() []backend.KV {
	var kv []backend.KV
	if c.grpcWire() && !c.flags.grpcStream && c.flags.grpcClient != client.TransportGRPCGo {
		kv = append(kv, backend.KV{Key: "grpc-client", Value: c.flags.grpcClient})
	}
	if c.flags.grpcConns != 1 {
		kv = append(kv, backend.KV{Key: "grpc-conns", Value: strconv.Itoa(c.flags.grpcConns)})
	}
	if c.flags.grpcStream {
		kv = append(kv, backend.KV{Key: "grpc-stream", Value: "on"})
	}
	if c.flags.clientPoll > 0 {
		kv = append(kv, backend.KV{Key: "client-poll", Value: c.flags.clientPoll.String()})
	}
	return kv
}

// targetLines are the config lines of a run against -target servers: what
// they are and serve, and the suite's own settings that still apply.
func (c *config) targetLines() []backend.KV {
	var urls []string
	for _, t := range c.targets {
		urls = append(urls, t.url)
	}
	kv := []backend.KV{{Key: "backend", Value: "target"}, {Key: "target", Value: strings.Join(urls, ",")}}
	if c.remote != nil {
		kv = append(kv, backend.KV{Key: "server", Value: c.remote.server})
	}
	return append(append(kv,
		backend.KV{Key: "gomaxprocs", Value: strconv.Itoa(runtime.GOMAXPROCS(0))},
		backend.KV{Key: "model", Value: c.flags.shared.Name()},
		backend.KV{Key: "size", Value: fmt.Sprintf("%dx%d", c.h, c.w)},
		backend.KV{Key: "seed", Value: strconv.FormatUint(c.flags.shared.Seed, 10)},
		backend.KV{Key: "poisson", Value: strconv.FormatBool(c.flags.poisson)},
		backend.KV{Key: "window", Value: c.windowLine()},
	), c.clientLines()...)
}

// windowLine describes the measurement windows: "off", or their minimum
// length and responses, the stability rule and the most windows.
func (c *config) windowLine() string {
	w := c.window
	if w == nil {
		return "off"
	}
	return fmt.Sprintf("%v requests=%d stability=%v%% compare=throughput,p50 max=%d",
		w.Duration, w.Requests, strconv.FormatFloat(w.Stability, 'f', -1, 64), w.MaxWindows)
}

// printConfig writes the config lines and Unit lines that head the output, so
// results of different machines and settings never mix silently. (Commit and
// date are left to scripts/sweep: lines that differ between any two runs
// would split benchstat's before/after tables.)
func (c *config) printConfig(w io.Writer, device []backend.KV) {
	for _, kv := range append(c.configLines(), device...) {
		fmt.Fprintf(w, "%s: %s\n", kv.Key, kv.Value)
	}
	for _, u := range units {
		fmt.Fprintf(w, "Unit %s better=%s\n", u.name, u.better)
	}
	if n := slices.Max(c.serverCounts()); n > 1 {
		for i := range n {
			fmt.Fprintf(w, "Unit %s better=higher\n", serverUnit(i))
		}
	}
	fmt.Fprintf(w, "Unit %s better=higher\n", c.capacityUnit())
}

var gpu struct {
	once sync.Once
	kv   []backend.KV
	err  error
}

// gpuAvailable reports whether the cuda back-end can run here, or why not.
func gpuAvailable() error {
	gpu.once.Do(func() { gpu.kv, gpu.err = cuda.Describe() })
	return gpu.err
}

// deviceConfig returns the GPU's config lines when the suite uses the cuda
// back-end.
func (c *config) deviceConfig() []backend.KV {
	if len(c.targets) > 0 {
		return nil // the targets' machine is not known
	}
	for _, be := range c.backends {
		if be == "cuda" && gpuAvailable() == nil {
			return gpu.kv
		}
	}
	return nil
}

// infoLines tracks the back-end config lines printed so far: a line applies
// to the benchmark results after it, so a line is printed again only when its
// value changes.
type infoLines struct {
	mu      sync.Mutex
	printed map[string]string
}

// print writes the lines of kvs whose value is new.
func (l *infoLines) print(w io.Writer, kvs []backend.KV) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.printed == nil {
		l.printed = map[string]string{}
	}
	for _, kv := range kvs {
		if old, ok := l.printed[kv.Key]; !ok || old != kv.Value {
			fmt.Fprintf(w, "%s: %s\n", kv.Key, kv.Value)
			l.printed[kv.Key] = kv.Value
		}
	}
}

// changed returns the first line of kvs whose value differs from the one in
// force, or ok false when all agree.
func (l *infoLines) changed(kvs []backend.KV) (line string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, kv := range kvs {
		if old, seen := l.printed[kv.Key]; !seen || old != kv.Value {
			return fmt.Sprintf("%s: %s (in force: %q)", kv.Key, kv.Value, old), true
		}
	}
	return "", false
}

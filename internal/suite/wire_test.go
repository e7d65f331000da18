package suite

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchproc"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/loadgen"
	"github.com/inferbench/inferbench/inference/metrics"
)

// testServeBin builds (once) the inferbench command the suite binaries that
// tests run are given with -serve-bin.
func testServeBin(t *testing.T) string {
	t.Helper()
	bin, err := serveBinary()
	require.NoError(t, err)
	return bin
}

// byTransport returns the results by their transport= value.
func byTransport(t *testing.T, rs []*benchfmt.Result) map[string]*benchfmt.Result {
	out := map[string]*benchfmt.Result{}
	for _, r := range rs {
		_, tr, ok := strings.Cut(nameOf(r), "/transport=")
		require.True(t, ok, "%s has no transport", nameOf(r))
		out[tr] = r
	}
	return out
}

// shmObjects lists the suite's shared-memory objects in /dev/shm.
func shmObjects(t *testing.T) []string {
	names, err := filepath.Glob("/dev/shm/inferbench-suite-*")
	require.NoError(t, err)
	return names
}

func TestSuiteBinaryDrivesEveryTransport(t *testing.T) {
	leftBefore := shmObjects(t)
	dir := t.TempDir()
	reqPath := filepath.Join(dir, "requests.csv")
	stdout, stderr, code := suiteBinary(t, append([]string{"-test.bench", "Server$", "-test.benchtime", "20x",
		"-transports", "inproc,grpc,http,grpc-shm,http-shm", "-serve-bin", testServeBin(t), "-requests", reqPath}, tinySuite...)...)
	require.Zero(t, code, "stderr: %s", stderr)
	got := byTransport(t, results(t, stdout))
	require.Len(t, got, 5, "stdout: %s", stdout)
	for _, tr := range []string{"inproc", "grpc", "http", "grpc-shm", "http-shm"} {
		r := got[tr]
		require.NotNil(t, r, "transport %s: stdout: %s", tr, stdout)
		assert.Equal(t, "Server/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=burst/transport="+tr, nameOf(r))
		assert.Positive(t, value(t, r, "samples/s"), tr)
		for _, unit := range []string{"mean-latency-ns", "p50-latency-ns", "p99-latency-ns", "queue-ns", "h2d-ns", "compute-ns", "d2h-ns",
			"warmup-ns", "first-ns", "cpu-util-pct", "peak-rss-MB"} {
			assert.Positive(t, value(t, r, unit), "%s: %s", tr, unit)
		}
		assert.Equal(t, 1.0, value(t, r, "mean-batch"), tr)
		_, perServer := lookup(r, "server0-req/s")
		assert.False(t, perServer, "%s: one server has no per-server figure", tr)
		start, hasStart := lookup(r, "start-ns")
		if tr == "inproc" {
			assert.False(t, hasStart, "an in-process server starts no process")
			continue
		}
		require.True(t, hasStart, tr)
		assert.Greater(t, start, value(t, r, "warmup-ns"), "%s: the process warms up after it starts and before it serves", tr)
	}

	rows := readCSV(t, reqPath)
	col := func(name string) int { return index(t, rows[0], name) }
	servers := map[string][]string{}
	for _, row := range rows[1:] {
		_, tr, _ := strings.Cut(row[col("benchmark")], "/transport=")
		servers[tr] = append(servers[tr], row[col("server")])
		if tr != "inproc" {
			assert.Empty(t, row[col("queue_ns")], "a remote request's stage times are not known")
			assert.NotEmpty(t, row[col("done_ns")])
		}
	}
	assert.Equal(t, slices.Repeat([]string{""}, 20), servers["inproc"])
	assert.Equal(t, slices.Repeat([]string{"0"}, 20), servers["grpc-shm"])
	assert.Equal(t, leftBefore, shmObjects(t), "shared-memory objects left behind")
}

// The nop back-end measures the front door alone: in process and in a
// served process, its logits copy the input, so a request answered at all
// went through the whole path.
func TestSuiteBinaryServesTheNopBackend(t *testing.T) {
	flags := slices.Clone(tinySuite)
	flags[slices.Index(flags, "-backends")+1] = "nop"
	stdout, stderr, code := suiteBinary(t, append([]string{"-test.bench", "Server$", "-test.benchtime", "5x",
		"-transports", "inproc,grpc-shm", "-serve-bin", testServeBin(t)}, flags...)...)
	require.Zero(t, code, "stderr: %s", stderr)
	got := byTransport(t, results(t, stdout))
	for _, tr := range []string{"inproc", "grpc-shm"} {
		r := got[tr]
		require.NotNil(t, r, "transport %s: stdout: %s", tr, stdout)
		assert.Equal(t, "Server/backend=nop/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=burst/transport="+tr, nameOf(r))
		assert.Positive(t, value(t, r, "p50-latency-ns"), tr)
	}
}

// With -grpc-stream the gRPC transports send every request as a message of a
// ModelStreamInfer call per connection, with -client-poll the connections'
// reads (HTTP's too) look before they sleep, and the results say so.
func TestSuiteBinaryStreamsOverGRPC(t *testing.T) {
	flags := slices.Clone(tinySuite)
	flags[slices.Index(flags, "-backends")+1] = "nop"
	stdout, stderr, code := suiteBinary(t, append([]string{"-test.bench", "Server$", "-test.benchtime", "20x",
		"-transports", "grpc,grpc-shm,http-shm", "-grpc-stream", "-client-poll", "200us", "-grpc-conns", "2", "-loads", "closed", "-serve-bin", testServeBin(t)}, flags...)...)
	require.Zero(t, code, "stderr: %s", stderr)
	assert.Contains(t, stdout, "\ngrpc-stream: on\nclient-poll: 200µs\n")
	got := byTransport(t, results(t, stdout))
	for _, tr := range []string{"grpc", "grpc-shm", "http-shm"} {
		r := got[tr]
		require.NotNil(t, r, "transport %s: stdout: %s", tr, stdout)
		assert.Positive(t, value(t, r, "p50-latency-ns"), tr)
		assert.Positive(t, value(t, r, "samples/s"), tr)
	}
}

func TestSuiteBinaryStartsSeveralServers(t *testing.T) {
	stdout, stderr, code := suiteBinary(t, append([]string{"-test.bench", "Server$", "-test.benchtime", "40x",
		"-transports", "inproc,grpc-shm", "-servers", "2", "-loads", "closed", "-serve-bin", testServeBin(t)}, tinySuite...)...)
	require.Zero(t, code, "stderr: %s", stderr)
	rs := results(t, stdout)
	require.Len(t, rs, 1, "inproc is one server: it does not run at servers=2")
	r := rs[0]
	assert.Equal(t, "Server/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/servers=2/load=closed/concurrency=4/transport=grpc-shm", nameOf(r),
		"2 requests outstanding per worker and server")
	s0, s1 := value(t, r, "server0-req/s"), value(t, r, "server1-req/s")
	assert.Positive(t, s0)
	assert.Positive(t, s1)
	assert.InEpsilon(t, value(t, r, "req/s"), s0+s1, 1e-3, "the servers' shares add up to the whole")
	assert.Contains(t, stdout, "\nUnit server1-req/s better=higher\n")
	value(t, r, "compute-ns")
	value(t, r, "peak-rss-MB")
}

func TestSuiteBinaryDrivesTargets(t *testing.T) {
	bin := testServeBin(t)
	// Two servers of one model: the zero-cost nop back-end, and ResNet-18
	// computed on the CPU, milliseconds per request here.
	var urls []string
	var fastHTTP string
	for _, be := range []string{"nop", "cpu"} {
		p, err := startServe(bin, []string{"serve", "-log", "json", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-metrics-addr", "",
			"-backend", be, "-model", "resnet18", "-size", "32x32", "-shm"}, os.Environ())
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, p.stop()) })
		urls = append(urls, "grpc://"+p.addrs["grpc"])
		if fastHTTP == "" {
			fastHTTP = "http://" + p.addrs["http"]
		}
	}
	stdout, stderr, code := suiteBinary(t, "-test.bench", "Server$", "-test.benchtime", "100x", "-batches", "1",
		"-loads", "closed", "-concurrency", "4", "-target", strings.Join(urls, ","), "-transports", "grpc,grpc-shm")
	require.Zero(t, code, "stderr: %s", stderr)
	got := byTransport(t, results(t, stdout))
	require.Len(t, got, 2, "stdout: %s", stdout)
	for tr, r := range got {
		assert.Equal(t, "Server/batch=1/servers=2/load=closed/concurrency=4/transport="+tr, nameOf(r))
		fast, slow := value(t, r, "server0-req/s"), value(t, r, "server1-req/s")
		assert.Greater(t, fast, 2*slow, "%s: least outstanding requests sends the faster server more", tr)
		assert.Positive(t, slow, tr)
		for _, unit := range []string{"queue-ns", "compute-ns", "mean-batch"} {
			value(t, r, unit) // read over the statistics extension
		}
		for _, unit := range []string{"warmup-ns", "start-ns", "peak-rss-MB", "cpu-util-pct", "gpu-util-pct"} {
			_, ok := lookup(r, unit)
			assert.False(t, ok, "%s: a running server's %s is not known", tr, unit)
		}
	}
	for _, line := range []string{"backend: target", "target: " + strings.Join(urls, ","), "server: inferbench ", "model: resnet18", "size: 32x32"} {
		assert.Contains(t, "\n"+stdout, "\n"+line)
	}

	// One target, over HTTP: the URL names the transport.
	stdout, stderr, code = suiteBinary(t, "-test.bench", "Server$", "-test.benchtime", "5x", "-batches", "2", "-target", fastHTTP)
	require.Zero(t, code, "stderr: %s", stderr)
	rs := results(t, stdout)
	require.Len(t, rs, 1)
	assert.Equal(t, "Server/batch=2/servers=1/load=burst/transport=http", nameOf(rs[0]))
	assert.Equal(t, 2.0, value(t, rs[0], "mean-batch"))

	_, stderr, code = suiteBinary(t, "-test.bench", "Server$", "-test.benchtime", "5x", "-target", urls[0], "-model-name", "resnet50")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `-target `+urls[0]+`: model "resnet50": metadata: server answered NotFound`)
}

func TestWireFlagErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "inferbench")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"transport", []string{"-transports", "tcp"}, `-transports "tcp": "tcp" is not one of inproc, grpc, http, grpc-shm, http-shm, grpc-cudashm, http-cudashm`},
		{"no transport", []string{"-transports", ","}, `-transports ",": give at least one of inproc`},
		{"scheme", []string{"-target", "ftp://127.0.0.1:1"}, `-target "ftp://127.0.0.1:1": "ftp://127.0.0.1:1": want grpc://host:port or http://host:port`},
		{"no port", []string{"-target", "grpc://localhost"}, `"grpc://localhost": want grpc://host:port or http://host:port, with a port`},
		{"path", []string{"-target", "http://127.0.0.1:8000/v2"}, `want only a scheme, a host and a port`},
		{"two protocols", []string{"-target", "grpc://127.0.0.1:1,http://127.0.0.1:2"}, `all targets must speak one protocol (grpc:// first)`},
		{"twice", []string{"-target", "grpc://127.0.0.1:1", "-target", "grpc://127.0.0.1:1"}, `listed twice`},
		{"TLS and not", []string{"-target", "grpcs://127.0.0.1:1,grpc://127.0.0.1:2"}, `all targets must speak one protocol (grpcs:// first)`},
		{"CA without TLS", []string{"-target", "grpc://127.0.0.1:1", "-target-ca", "ca.pem"}, `-target-ca "ca.pem": give it with grpcs:// or https:// targets`},
		{"CA missing", []string{"-target", "https://127.0.0.1:1", "-target-ca", filepath.Join(dir, "none.pem")}, `-target-ca "` + filepath.Join(dir, "none.pem") + `": client: reading CA file`},
		{"transport of another scheme", []string{"-target", "grpc://127.0.0.1:1", "-transports", "grpc,http"},
			`-transports "grpc,http": a grpc:// target is reached over grpc or grpc-shm or grpc-cudashm, not "http"`},
		{"inproc with a target", []string{"-target", "http://127.0.0.1:1", "-transports", "inproc"}, `not "inproc"`},
		{"shared memory afar", []string{"-target", "grpc://192.0.2.1:8001", "-transports", "grpc-shm"},
			`-transports "grpc-shm": grpc-shm needs the server on this machine, and target grpc://192.0.2.1:8001 is not`},
		{"CUDA shared memory", []string{"-transports", "grpc-cudashm"}, map[string]string{
			"":     `-transports "grpc-cudashm": grpc-cudashm puts tensors in the suite's GPU memory: build the suite with -tags cuda`,
			"cuda": `-transports "grpc-cudashm": grpc-cudashm needs -backends cuda: the server's GPU reads the suite's GPU memory`}[suiteTags]},
		{"settings of a target", []string{"-target", "grpc://127.0.0.1:1", "-workers", "2"}, `-workers "2": -target drives a running server, which has its own settings: give -workers or -target, not both`},
		{"servers of a target", []string{"-target", "grpc://127.0.0.1:1", "-servers", "2"}, `give -servers or -target`},
		{"servers in process", []string{"-servers", "2"}, `-servers "2": -servers starts server processes: add a wire transport`},
		{"servers 0", []string{"-servers", "0", "-transports", "grpc"}, `-servers "0": servers must be at least 1 (got 0)`},
		{"serve-bin missing", []string{"-transports", "grpc", "-serve-bin", filepath.Join(dir, "none")}, `-serve-bin "` + filepath.Join(dir, "none") + `": stat`},
		{"serve-bin not executable", []string{"-transports", "grpc", "-serve-bin", notExec}, `not an executable file`},
		{"model name", []string{"-model-name", ""}, `-model-name "": give the model's name`},
		{"stream without gRPC", []string{"-grpc-stream", "-transports", "inproc,http"}, `-grpc-stream "true": it changes how gRPC requests are sent: add a gRPC transport`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSuiteFlags(t, noGPU, "Server", "100x", tc.args...)
			var fe *flagError
			require.ErrorAs(t, err, &fe)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestWireTransportsWithoutGoNeedServeBin(t *testing.T) {
	old := findGo
	findGo = func() (string, error) { return "", fmt.Errorf("no go command on PATH or in GOROOT") }
	defer func() { findGo = old }()
	_, err := parseSuiteFlags(t, noGPU, "Server", "100x", "-transports", "inproc,grpc")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `-serve-bin "": the wire transports start inferbench serve, and there is no go command here to build it`)
	assert.Contains(t, err.Error(), "go build [-tags cuda] -o .gpu/inferbench ./cmd/inferbench")
	assert.Contains(t, err.Error(), "(the GPU machine has no Go toolchain)")

	_, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-transports", "inproc")
	assert.NoError(t, err, "in process, no server binary is needed")
	_, err = parseSuiteFlags(t, noGPU, "", "", "-transports", "grpc")
	assert.NoError(t, err, "no benchmark runs")
}

func TestTransportFlagValues(t *testing.T) {
	c, err := parseSuiteFlags(t, noGPU, "Server", "100x")
	require.NoError(t, err)
	assert.Equal(t, []string{"inproc"}, c.transports, "default")
	assert.Equal(t, []int{1}, c.serverCounts())
	assert.NotContains(t, firstName(t, c), "servers=", "no servers= without -servers")

	c, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-target", "http://localhost:8000", "-target", "http://127.0.0.1:9000,http://[::1]:7000")
	require.NoError(t, err)
	assert.Equal(t, []string{"http"}, c.transports, "the URL's scheme")
	assert.Equal(t, []int{3}, c.serverCounts(), "every target at once")
	assert.Contains(t, firstName(t, c), "/servers=3/")
	for _, tg := range c.targets {
		assert.True(t, tg.local, tg.url)
	}
	assert.Equal(t, "[::1]:7000", c.targets[2].addr)

	c, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-target", "grpcs://127.0.0.1:9000")
	require.NoError(t, err)
	assert.Equal(t, []string{"grpc"}, c.transports, "grpcs:// is gRPC over TLS")
	assert.True(t, c.targets[0].tls)
	require.NotNil(t, c.targetTLS, "the system's roots")
	assert.False(t, c.targetTLS.InsecureSkipVerify)
	c, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-target", "https://127.0.0.1:9000", "-target-ca", "insecure")
	require.NoError(t, err)
	assert.Equal(t, []string{"http"}, c.transports)
	require.NotNil(t, c.targetTLS)
	assert.True(t, c.targetTLS.InsecureSkipVerify, "-target-ca insecure")
	c, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-target", "http://127.0.0.1:9000")
	require.NoError(t, err)
	assert.Nil(t, c.targetTLS, "plaintext")

	c, err = parseSuiteFlags(t, noGPU, "Server", "100x", "-servers", "1,2", "-transports", "grpc-shm,inproc")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2}, c.serverCounts())
	assert.Contains(t, firstName(t, c), "/servers=1/")
}

// firstName is the name of BenchmarkServer's first sub-benchmark under c.
func firstName(t *testing.T, c *config) string {
	t.Helper()
	ps, skip := c.matrix("Server")
	require.Empty(t, skip)
	require.NotEmpty(t, ps)
	return ps[0].name
}

func TestServeArgsFollowThePoint(t *testing.T) {
	ckpt, err := filepath.Abs("resnet18.pt") // only named, not read
	require.NoError(t, err)
	c, err := parseSuiteFlags(t, noGPU, "", "", "-size", "64x48", "-seed", "7", "-pinned-input", "-model-name", "rn")
	require.NoError(t, err)
	p := point{be: "cuda", batch: 32, workers: 2, pipe: "overlap", prec: "fp16", graphs: "on", devices: 2}
	assert.Equal(t, []string{"serve", "-log", "json", "-http-addr", "", "-grpc-addr", "127.0.0.1:0", "-metrics-addr", "",
		"-model-name", "rn", "-backend", "cuda", "-max-batch", "32", "-batches", "32", "-max-queue-delay", "0s", "-workers", "2", "-pipeline", "overlap",
		"-precision", "fp16", "-graphs=true", "-devices", "0,1", "-size", "64x48", "-seed", "7", "-pinned-input=true",
		"-convs", "legacy", "-max-queue", "4096", "-queue-policy", "block", "-idle-poll", "0s", "-grpc-server", "h2grpc", "-shm", "-model", "resnet18"}, c.serveArgs(p, grpcSHM))
	c.flags.shared.Checkpoint = ckpt
	args := c.serveArgs(p, httpT)
	assert.Equal(t, []string{"-checkpoint", ckpt}, args[len(args)-2:])
	assert.Equal(t, []string{"-http-addr", "127.0.0.1:0", "-grpc-addr", ""}, args[3:7])
	p.batching = "on" // merged batches of up to 256 = 8*32, prepared at 32, 64, 128 and 256 images
	assert.Equal(t, []string{"-max-batch", "256", "-batches", "32,64,128,256", "-max-queue-delay", "1ms"}, c.serveArgs(p, grpcT)[13:19])
	p.batching = "off"
	c.flags.shared.IdlePoll = 500 * time.Microsecond
	args = c.serveArgs(p, grpcT)
	assert.Equal(t, []string{"-idle-poll", "500µs"}, args[len(args)-6:len(args)-4])
	c.flags.shared.GRPCServer = "grpc-go"
	args = c.serveArgs(p, grpcT)
	assert.Equal(t, []string{"-grpc-server", "grpc-go"}, args[len(args)-4:len(args)-2])
	cfg, err := c.pointConfig(p)
	require.NoError(t, err)
	assert.Equal(t, 500*time.Microsecond, cfg.IdlePoll, "in process too")

	// The command accepts every flag: it gets past its flag checks (exit
	// status 2) and fails at the back-end, as cuda is not usable here.
	if gpuAvailable() == nil {
		t.Skip("cuda is usable here: the server would start")
	}
	c.flags.shared.Checkpoint = ""
	out, err := exec.Command(testServeBin(t), c.serveArgs(p, grpcT)...).CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 1, exit.ExitCode(), "a flag error exits 2: %s", out)
	assert.Contains(t, string(out), "opening cuda back-end", "%s", out)
}

func TestServeEnvGivesEachServerItsGPUs(t *testing.T) {
	p := point{be: "cuda", devices: 2}
	c, err := parseSuiteFlags(t, noGPU, "", "", "-servers", "2", "-transports", "grpc")
	require.NoError(t, err)
	visible := func(env []string) string {
		var v []string
		for _, e := range env {
			if s, ok := strings.CutPrefix(e, "CUDA_VISIBLE_DEVICES="); ok {
				v = append(v, s)
			}
		}
		return strings.Join(v, "|")
	}
	for _, tc := range []struct {
		name, own string // own: this process's CUDA_VISIBLE_DEVICES, "-" for unset
		server    int
		want      string
	}{
		{"first", "-", 0, "0,1"},
		{"second", "-", 1, "2,3"},
		{"within this process's", "4,5,6,7", 1, "4,5,6,7|6,7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.own == "-" {
				t.Setenv("CUDA_VISIBLE_DEVICES", "")
				os.Unsetenv("CUDA_VISIBLE_DEVICES")
			} else {
				t.Setenv("CUDA_VISIBLE_DEVICES", tc.own)
			}
			env, err := c.serveEnv(p, tc.server)
			require.NoError(t, err)
			assert.Equal(t, tc.want, visible(env), "the last one wins")
		})
	}
	t.Setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
	_, err = c.serveEnv(p, 1)
	assert.ErrorContains(t, err, "server 1 needs GPUs 2 to 3, and CUDA_VISIBLE_DEVICES=0,1,2 has 3")

	env, err := c.serveEnv(point{be: "cpu", devices: 1}, 1)
	require.NoError(t, err)
	assert.Equal(t, "0,1,2", visible(env), "the cpu back-end's servers keep this process's")
}

func TestParseWarmupLine(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("warm-up", "load", 1500*time.Microsecond, "setup", 2*time.Second, "first", 30*time.Millisecond, "total", 2031500*time.Microsecond,
		"setup.prime", time.Second, "cpu-threads", "2", "cpu-gemm-kernel", "avx512")
	w, kvs, err := parseWarmup([]byte(buf.String()))
	require.NoError(t, err)
	assert.Equal(t, 1500*time.Microsecond, w.Load)
	assert.Equal(t, 2*time.Second, w.Setup)
	assert.Equal(t, 30*time.Millisecond, w.First)
	assert.Equal(t, []backend.KV{{Key: "cpu-threads", Value: "2"}, {Key: "cpu-gemm-kernel", Value: "avx512"}}, kvs, "the config lines in their order")

	_, _, err = parseWarmup([]byte(`{"msg":"warm-up","load":"1s","setup":2,"first":3}`))
	assert.ErrorContains(t, err, "without load, setup and first in nanoseconds")
	_, _, err = parseWarmup([]byte(`[1]`))
	assert.ErrorContains(t, err, "not a JSON object")
}

func TestProcFiguresAgreeWithTheProcessOwn(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skipf("no /proc: %v", err)
	}
	pid := os.Getpid()
	rusage := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	// Spend some CPU time, so that there is something to agree on.
	for x, end := 0, time.Now().Add(50*time.Millisecond); time.Now().Before(end); x++ {
		_ = x * x
	}
	before := rusage()
	got, err := procCPUTime(pid)
	require.NoError(t, err)
	after := rusage()
	assert.GreaterOrEqual(t, got, before-20*time.Millisecond, "schedstat %v, rusage %v", got, before)
	assert.LessOrEqual(t, got, after+20*time.Millisecond, "schedstat %v, rusage %v", got, after)

	peak, err := procPeakRSS(pid)
	require.NoError(t, err)
	own, err := metrics.PeakRSS()
	require.NoError(t, err)
	assert.InEpsilon(t, own, peak, 0.05)

	_, err = procCPUTime(1 << 30)
	assert.Error(t, err, "no such process")
}

func TestSumsOfModelMapsTritonsStatistics(t *testing.T) {
	d := func(n, ns uint64) client.StatisticDuration { return client.StatisticDuration{Count: n, Ns: ns} }
	s := sumsOfModel(client.ModelStatistics{InferenceCount: 96, ExecutionCount: 3, InferenceStats: client.InferStatistics{
		Success: d(3, 900), Fail: d(1, 0), Queue: d(3, 30), ComputeInput: d(3, 60), ComputeInfer: d(3, 600), ComputeOutput: d(3, 9)}})
	for _, tc := range []struct {
		stage metrics.Stage
		want  time.Duration
	}{{metrics.Queue, 10}, {metrics.CopyIn, 20}, {metrics.Compute, 200}, {metrics.CopyOut, 3}} {
		got, ok := s.stageMean(tc.stage)
		assert.True(t, ok)
		assert.Equal(t, tc.want, got, "stage %v", tc.stage)
	}
	m := measurement{batch: 32, mode: loadgen.Burst}
	m.setServers(snapshot{servers: []serverSums{s, s}, answered: []uint64{30, 10}})
	m.final.Completed, m.final.Elapsed = 40, 2*time.Second
	figs := figureMap(figures(&m, warmupInfo{}, -1))
	assert.Equal(t, 32.0, figs["mean-batch"], "192 images in 6 batches over both servers")
	assert.Equal(t, 15.0, figs["server0-req/s"])
	assert.Equal(t, 5.0, figs["server1-req/s"])
	assert.Equal(t, float64(200), figs["compute-ns"])
}

func TestSnapshotsDifferenceAndAdd(t *testing.T) {
	sums := func(n int64, items uint64) serverSums {
		var s serverSums
		s.stage[metrics.Compute].n, s.stage[metrics.Compute].sum = n, 10*n
		s.batches, s.items = uint64(n), items
		return s
	}
	a := snapshot{servers: []serverSums{sums(1, 8), sums(2, 16)}, answered: []uint64{1, 2}}
	b := snapshot{servers: []serverSums{sums(4, 32), sums(3, 24)}, answered: []uint64{4, 3}}
	d := b.sub(a)
	assert.Equal(t, snapshot{servers: []serverSums{sums(3, 24), sums(1, 8)}, answered: []uint64{3, 1}}, d)
	var total snapshot
	total.add(d)
	total.add(d)
	assert.Equal(t, snapshot{servers: []serverSums{sums(6, 48), sums(2, 16)}, answered: []uint64{6, 2}}, total)
	assert.Equal(t, snapshot{}, snapshot{}.sub(a), "nothing from nothing")
}

func TestSlotPoolSharesOnlyWhenExhausted(t *testing.T) {
	p := slotPool{n: 2, free: []int{1, 0}}
	s0, own0 := p.get()
	s1, own1 := p.get()
	assert.Equal(t, []int{0, 1}, []int{s0, s1})
	assert.True(t, own0 && own1)
	s2, own2 := p.get()
	assert.False(t, own2, "a third request in flight shares a slot")
	assert.Equal(t, 1, p.sharedSlots())
	p.put(s2, own2)
	p.put(s0, own0)
	s3, own3 := p.get()
	assert.Equal(t, 0, s3, "the freed slot")
	assert.True(t, own3)
	assert.Equal(t, 1, p.sharedSlots())
}

// TestIgnoreTransportComparesWithOldFiles keeps benchstat comparisons with
// files recorded before the transport dimension possible: -ignore /transport
// puts a name without it and the same name with /transport=inproc on one row.
func TestIgnoreTransportComparesWithOldFiles(t *testing.T) {
	old := "BenchmarkServer/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=burst-2 \t10\t100 ns/op\n"
	cur := "BenchmarkServer/backend=cpu/batch=1/workers=1/pipeline=serial/precision=fp32/graphs=off/devices=1/load=burst/transport=inproc-2 \t10\t100 ns/op\n"
	row := func(ignore string, text string) string {
		var parser benchproc.ProjectionParser
		filter, err := benchproc.NewFilter("*")
		require.NoError(t, err)
		if ignore != "" {
			_, err := parser.Parse(ignore, filter) // as benchstat -ignore does
			require.NoError(t, err)
		}
		rows, err := parser.Parse(".fullname", filter)
		require.NoError(t, err)
		r := benchfmt.NewReader(strings.NewReader(text), "f")
		require.True(t, r.Scan())
		res, ok := r.Result().(*benchfmt.Result)
		require.True(t, ok)
		return rows.Project(res).String()
	}
	assert.Equal(t, row("/transport", old), row("/transport", cur))
	assert.NotEqual(t, row("", old), row("", cur), "without -ignore they are two benchmarks")
}

// metadataOnly is a server that answers only metadata calls.
type metadataOnly struct {
	wireClient
	server client.ServerMetadata
	model  client.ModelMetadata
}

func (m metadataOnly) ServerMetadata(context.Context) (*client.ServerMetadata, error) {
	return &m.server, nil
}

func (m metadataOnly) ModelMetadata(_ context.Context, name, _ string) (*client.ModelMetadata, error) {
	if name != m.model.Name {
		return nil, &client.Error{HTTPStatus: 404, Msg: "unknown model " + name}
	}
	return &m.model, nil
}

func TestLearnModelFromMetadata(t *testing.T) {
	tensor := func(name, dtype string, shape ...int64) client.TensorMetadata {
		return client.TensorMetadata{Name: name, Datatype: dtype, Shape: shape}
	}
	triton := client.ServerMetadata{Name: "triton", Version: "2.50.0", Extensions: []string{"statistics", "system_shared_memory"}}
	for _, tc := range []struct {
		name    string
		server  client.ServerMetadata
		ins     []client.TensorMetadata
		outs    []client.TensorMetadata
		want    remoteModel
		wantErr string
	}{
		{"dynamic size from -size", triton, []client.TensorMetadata{tensor("images", "FP32", -1, 3, -1, -1)},
			[]client.TensorMetadata{tensor("probs", "FP16", -1, 1000), tensor("label", "INT64", -1, 1)},
			remoteModel{name: "m", input: "images", fixedBatch: -1, c: 3, h: 64, w: 48, server: "triton 2.50.0", stats: true, shm: true,
				outputs: []remoteOutput{{"probs", 2000}, {"label", 8}}}, ""},
		{"fixed batch, no extensions", client.ServerMetadata{Name: "other"}, []client.TensorMetadata{tensor("x", "FP32", 8, 1, 28, 28)},
			[]client.TensorMetadata{tensor("y", "FP32", 8, -1)},
			remoteModel{name: "m", input: "x", fixedBatch: 8, c: 1, h: 28, w: 28, server: "other", outputs: []remoteOutput{{"y", -1}}}, ""},
		{"two inputs", triton, []client.TensorMetadata{tensor("a", "FP32", -1, 3, 8, 8), tensor("b", "FP32", -1, 3, 8, 8)}, nil, remoteModel{},
			`model "m" has 2 inputs: the suite sends one tensor of images`},
		{"FP16 input", triton, []client.TensorMetadata{tensor("a", "FP16", -1, 3, 8, 8)}, nil, remoteModel{},
			`model "m": input "a" is FP16 [-1 3 8 8]: the suite sends FP32 [batch, C, H, W]`},
		{"no batch dimension", triton, []client.TensorMetadata{tensor("a", "FP32", 3, 8, 8)}, nil, remoteModel{}, `the suite sends FP32 [batch, C, H, W]`},
		{"no outputs", triton, []client.TensorMetadata{tensor("a", "FP32", -1, 3, 8, 8)}, nil, remoteModel{}, `model "m": metadata lists no output`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := metadataOnly{server: tc.server, model: client.ModelMetadata{Name: "m", Inputs: tc.ins, Outputs: tc.outs}}
			got, err := learnModel(context.Background(), c, "m", 64, 48)
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	fixed := remoteModel{name: "m", fixedBatch: 8, outputs: []remoteOutput{{"y", -1}}}
	assert.ErrorContains(t, fixed.checkBatch(1), `model "m" takes batches of 8 images only, not 1 (-batches)`)
	assert.NoError(t, fixed.checkBatch(8))
	_, err := fixed.outputBytes(8)
	assert.ErrorContains(t, err, `output "y" has no fixed size per image, so it cannot be given a shared-memory region`)
	n, err := remoteModel{outputs: []remoteOutput{{"p", 2000}, {"l", 8}}}.outputBytes(4)
	require.NoError(t, err)
	assert.Equal(t, int64(8032), n)

	_, err = learnModel(context.Background(), metadataOnly{model: client.ModelMetadata{Name: "m"}}, "other", 1, 1)
	assert.ErrorContains(t, err, `model "other": metadata: server answered 404: unknown model other`)
}

package suite

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchfmt"
)

// bench runs the bench command in this process with args.
func bench(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = Bench(context.Background(), args, &o, &e)
	return o.String(), e.String(), err
}

func TestBenchCommandPrintsWhatGoTestPrints(t *testing.T) {
	stdout, stderr, err := bench(t, append(append([]string{}, tinySuite...), "-benchtime", "3x", "-count", "2", "-batches", "1,2")...)
	require.NoError(t, err, "stderr: %s", stderr)
	rs := results(t, stdout) // every line parses with benchfmt
	require.Len(t, rs, 4, "two configurations, two runs each: %s", stdout)
	c, err := parseSuiteFlags(t, noGPU, "Server", "3x", append(append([]string{}, tinySuite...), "-batches", "1,2")...)
	require.NoError(t, err)
	want := matrixNames(c)[:2] // BenchmarkServer's, as go test names them
	for i, r := range rs {
		assert.Equal(t, want[i/2], nameOf(r))
		assert.Equal(t, 3, r.Iters)
		assert.Positive(t, value(t, r, "samples/s"))
		value(t, r, "p99-latency-ns")
		value(t, r, "warmup-ns")
		for _, key := range []string{"model", "size", "backend", "goos", "pkg"} {
			assert.NotNil(t, r.GetConfig(key), "%s: no %s: config line", nameOf(r), key)
		}
		assert.Equal(t, "tiny", r.GetConfig("model"))
	}
	assert.Contains(t, stdout, "\nUnit samples/s better=higher\n")
	assert.NotContains(t, stdout, "[", "progress goes to stderr")

	assert.Contains(t, stderr, "[1/2] Benchmark"+want[0]+"\n")
	assert.Contains(t, stderr, "[2/2] Benchmark"+want[1]+"\n")
	_, summary, ok := strings.Cut(stderr, "summary")
	require.True(t, ok, "stderr: %s", stderr)
	lines := strings.Split(strings.TrimSpace(summary), "\n")
	require.Len(t, lines, 4, "a heading, a header and a line per configuration: %s", summary)
	for _, h := range []string{"configuration", "runs", "samples/s", "p50", "p99"} {
		assert.Contains(t, lines[1], h)
	}
	for i, name := range want {
		fields := strings.Fields(lines[2+i])
		require.Len(t, fields, 5, lines[2+i])
		assert.Equal(t, name, fields[0])
		assert.Equal(t, "2", fields[1], "runs")
	}
}

func TestBenchCommandFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"suite flag", []string{"-workers", "0"}, `-workers "0": workers must be at least 1 (got 0)`},
		{"benchtime", []string{"-benchtime", "2s"}, `-benchtime "2s": want a count of iterations of at least 1, such as 100x`},
		{"bench", []string{"-bench", "Overhead"}, `-bench "Overhead": "Overhead" is not one of Server, Scenario, Capacity`},
		{"count", []string{"-count", "0"}, `-count "0": runs must be at least 1`},
		{"argument", []string{"Server"}, `unexpected argument "Server"`},
		{"unknown flag", []string{"-test.bench", "."}, `flag provided but not defined: -test.bench`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := bench(t, tc.args...)
			require.ErrorIs(t, err, ErrUsage)
			assert.Contains(t, stderr, tc.want)
			assert.Empty(t, stdout, "nothing runs")
		})
	}
}

func TestBenchCommandDrivesATarget(t *testing.T) {
	p, err := startServe(testServeBin(t), []string{"serve", "-log", "json", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-metrics-addr", "",
		"-backend", "nop", "-model", "tiny", "-size", "32x32"}, os.Environ())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.stop()) })
	stdout, stderr, err := bench(t, "-benchtime", "5x", "-batches", "2", "-loads", "closed", "-concurrency", "2",
		"-target", "grpc://"+p.addrs["grpc"], "-model-name", "tiny")
	require.NoError(t, err, "stderr: %s", stderr)
	rs := results(t, stdout)
	require.Len(t, rs, 1, stdout)
	assert.Equal(t, "Server/batch=2/servers=1/load=closed/concurrency=2/transport=grpc", nameOf(rs[0]))
	assert.Equal(t, 2.0, value(t, rs[0], "mean-batch"), "read over the statistics extension")
	assert.Equal(t, "target", rs[0].GetConfig("backend"))
	assert.Equal(t, "grpc://"+p.addrs["grpc"], rs[0].GetConfig("target"))
}

// benchfmtReads is a compile-time reminder that results parse with x/perf's
// reader, as benchstat and scripts/gate read them.
var _ = benchfmt.NewReader

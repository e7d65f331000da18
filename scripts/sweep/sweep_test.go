package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSweepWithFakeBinary(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"-matrix", "seed", "-batches", "1,32", "-workers", "1", "-pipelines", "serial",
		"-count", "3", "-bin", "testdata/fakebench.sh", "-out", out, "-commit", "abc123", "--", "-size=224x224"}, &stdout, &stderr)
	require.NoError(t, err, "stderr: %s", stderr.String())

	path := filepath.Join(out, "nvidia-h200", "seed.txt")
	assert.Equal(t, path+"\n", stdout.String())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	text := string(data)
	assert.True(t, strings.HasPrefix(text, "# sweep -matrix seed -count 3 -benchtime 100x -backends=cuda -batches=1,32 -workers=1 -pipelines=serial"), "header: %q", text[:min(len(text), 200)])
	assert.Contains(t, text, "\nmatrix: seed\ncommit: abc123\ndate: ")
	assert.Contains(t, text, "\ngpu: NVIDIA H200\n")
	assert.Equal(t, 1, strings.Count(text, "\ngpu: "), "config lines of later rounds must be dropped")
	assert.Equal(t, 1, strings.Count(text, "\nUnit samples/s"), "Unit lines of later rounds must be dropped")
	assert.Contains(t, text, "\nsweep-args: -size=224x224\n")
	assert.Equal(t, 6, strings.Count(text, "\nBenchmarkServer/"), "results in file")

	progress := stderr.String()
	for _, want := range []string{
		"[1/6]", "[6/6] 100%", "eta", "a test log line", "2 configurations x 3 runs in 3 round(s)",
		"fakebench args: -test.run=^$ -test.bench=^BenchmarkServer$ -test.count=1 -test.benchtime=100x -backends=cuda -batches=1,32 -workers=1 -pipelines=serial -precisions=fp32 -graphs=off -devices=1 -loads=burst -size=224x224\n",
	} {
		assert.Contains(t, progress, want)
	}
	assert.NotContains(t, progress, "\n  PASS")

	// A second sweep of the same name must not overwrite the first.
	stdout.Reset()
	require.NoError(t, run([]string{"-matrix", "seed", "-batches", "1", "-count", "1", "-bin", "testdata/fakebench.sh", "-out", out}, &stdout, &stderr))
	assert.NotEqual(t, path+"\n", stdout.String())
	assert.Contains(t, stdout.String(), filepath.Join(out, "nvidia-h200", "seed-"))
	tmps, err := os.ReadDir(filepath.Join(out, "tmp"))
	require.NoError(t, err)
	assert.Empty(t, tmps, "temporary files left behind")
}

func TestSweepOneProcess(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"-matrix", "cpu-quick", "-workers", "1", "-count", "2", "-interleave=false",
		"-bin", "testdata/fakebench.sh", "-out", out, "-machine", "ci", "-name", "quick"}, &stdout, &stderr)
	require.NoError(t, err, "stderr: %s", stderr.String())
	data, err := os.ReadFile(filepath.Join(out, "ci", "quick.txt"))
	require.NoError(t, err)
	assert.Equal(t, 4, strings.Count(string(data), "\nBenchmarkServer/"), "results in file")
	assert.Contains(t, stderr.String(), "in 1 round(s)")
	assert.Contains(t, stderr.String(), "fakebench args: -test.run=^$ -test.bench=^BenchmarkServer$ -test.count=2 -test.benchtime=20x -backends=cpu -batches=1,8 -workers=1 ")
}

func TestSweepDeadlineThenAppend(t *testing.T) {
	out := t.TempDir()
	args := func(extra ...string) []string {
		return append([]string{"-matrix", "seed", "-batches", "1,32", "-workers", "1", "-pipelines", "serial",
			"-bin", "testdata/fakebench.sh", "-out", out, "-commit", "abc123"}, extra...)
	}
	var stdout, stderr bytes.Buffer
	// Each round sleeps 1 s: after the first, a second would end past 1.5 s.
	t.Setenv("FAKEBENCH_SLEEP", "1")
	require.NoError(t, run(args("-count", "5", "-deadline", "1500ms"), &stdout, &stderr), "stderr: %s", stderr.String())
	assert.Contains(t, stderr.String(), "stopping after 1 of 5 rounds")
	path := filepath.Join(out, "nvidia-h200", "seed.txt")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), "# sweep -matrix seed -count 1 "), "the header must count the rounds done: %q", string(data)[:60])
	assert.Equal(t, 2, strings.Count(string(data), "\nBenchmarkServer/"))

	stdout.Reset()
	t.Setenv("FAKEBENCH_SLEEP", "0")
	require.NoError(t, run(args("-count", "2", "-append", path), &stdout, &stderr), "stderr: %s", stderr.String())
	assert.Equal(t, path+"\n", stdout.String())
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	text := string(data)
	assert.True(t, strings.HasPrefix(text, "# sweep -matrix seed -count 3 "), "header: %q", text[:60])
	assert.Equal(t, 6, strings.Count(text, "\nBenchmarkServer/"), "results after appending")
	assert.Equal(t, 1, strings.Count(text, "\ngpu: "), "appended rounds must not repeat config lines")
	assert.Equal(t, 1, strings.Count(text, "\nsweep-args: "))

	// Appends of another setup must fail, before running when the file
	// tells (its first line, the sweep's own config lines), else after.
	tests := []struct {
		name  string
		extra []string
		gpu   string   // the fake's gpu: line
		want  []string // in the error
	}{
		{"other flags after --", []string{"-count", "1", "-append", path, "--", "-size=224x224"}, "", []string{
			"results of different setups must not be mixed (nothing was run):\n  sweep-args: line is \"none\" in the file but \"-size=224x224\" in this sweep"}},
		{"other commit", []string{"-count", "1", "-append", path, "-commit", "def456"}, "", []string{
			`commit: line is "abc123" in the file but "def456" in this sweep`}},
		{"other requests per run", []string{"-count", "1", "-append", path, "-benchtime", "200x"}, "", []string{
			"the file's sweep was\n  # sweep -matrix seed -count 3 -benchtime 100x -backends=cuda",
			"but this one is\n  # sweep -matrix seed -count 3 -benchtime 200x -backends=cuda"}},
		{"other GPU", []string{"-count", "1", "-append", path}, "NVIDIA H100 80GB HBM3", []string{
			"results of different setups must not be mixed (the new rounds are in ",
			`gpu: line is "NVIDIA H200" in the file but "NVIDIA H100 80GB HBM3" in this sweep`}},
		{"no file", []string{"-count", "1", "-append", filepath.Join(out, "missing.txt")}, "", []string{"missing.txt: no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.gpu != "" {
				t.Setenv("FAKEBENCH_GPU", tt.gpu)
			}
			err := run(args(tt.extra...), &stdout, &stderr)
			require.Error(t, err)
			for _, want := range tt.want {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, text, string(after), "a refused append must leave the file as it was")
}

func TestSweepFailures(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"binary fails", []string{"-bin", "testdata/fakebench.sh", "--", "-fail"}, "benchmark binary failed in round 1 after 0 results"},
		{"unknown matrix", []string{"-matrix", "nope"}, `unknown matrix "nope"`},
		{"bad count", []string{"-count", "0"}, "-count 0"},
		{"missing binary", []string{"-bin", "testdata/nonexistent"}, "sweep: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(append([]string{"-out", t.TempDir()}, tt.args...), &stdout, &stderr)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestDryRun(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"seed", []string{"-matrix", "seed", "-count", "10"},
			"30 configurations x 10 runs = 300 results\n<go test -c -tags 'cuda'> (10 rounds of) -test.run=^$ -test.bench=^BenchmarkServer$ -test.count=1 -test.benchtime=100x -backends=cuda -batches=1,32,64,128,256 -workers=1,2,4 -pipelines=serial,overlap -precisions=fp32 -graphs=off -devices=1 -loads=burst\n"},
		{"cpu-quick with overrides", []string{"-matrix", "cpu-quick", "-count", "6", "-workers", "1", "-benchtime", "5x", "-bin", "b.test", "-interleave=false"},
			"2 configurations x 6 runs = 12 results\nb.test -test.run=^$ -test.bench=^BenchmarkServer$ -test.count=6 -test.benchtime=5x -backends=cpu -batches=1,8 -workers=1 -pipelines=serial -precisions=fp32 -graphs=off -devices=1 -loads=burst\n"},
		{"gpu-full", []string{"-matrix", "gpu-full", "-count", "1", "-bin", "b"}, "180 configurations x 1 runs = 180 results\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.NoError(t, run(append(tt.args, "-n"), &stdout, &stderr))
			assert.True(t, strings.HasPrefix(stdout.String(), tt.want), "got %q, want prefix %q", stdout.String(), tt.want)
		})
	}
}

func TestProgressLine(t *testing.T) {
	tests := []struct {
		done, total int
		elapsed     time.Duration
		want        string
	}{
		{1, 4, 10 * time.Second, "[1/4]  25% elapsed 10s eta 30s"},
		{3, 300, 90 * time.Second, "[3/300]   1% elapsed 1m30s eta 2h28m30s"},
		{4, 4, 42 * time.Second, "[4/4] 100% elapsed 42s"},
		{5, 4, time.Second, "[5/4] 125% elapsed 1s"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, progressLine(tt.done, tt.total, tt.elapsed), "progressLine(%d, %d, %v)", tt.done, tt.total, tt.elapsed)
	}
}

func TestSlug(t *testing.T) {
	tests := map[string]string{
		"NVIDIA H200":                          "nvidia-h200",
		"NVIDIA H100 80GB HBM3":                "nvidia-h100-80gb-hbm3",
		"Intel(R) Xeon(R) Processor @ 2.10GHz": "intel-r-xeon-r-processor-2-10ghz",
		"":                                     "",
		"  --weird__ ":                         "weird",
	}
	for in, want := range tests {
		assert.Equal(t, want, slug(in), "slug(%q)", in)
	}
}

func TestAppendUnreadableCount(t *testing.T) {
	out := t.TempDir()
	args := []string{"-matrix", "seed", "-batches", "1", "-workers", "1", "-pipelines", "serial",
		"-bin", "testdata/fakebench.sh", "-out", out, "-commit", "abc123"}
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(append(args, "-count", "1"), &stdout, &stderr), "stderr: %s", stderr.String())
	path := filepath.Join(out, "nvidia-h200", "seed.txt")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	// A count that does not fit an int must stop the append, not be read as 0.
	huge := strings.Replace(string(data), " -count 1 ", " -count 99999999999999999999 ", 1)
	require.NotEqual(t, string(data), huge)
	require.NoError(t, os.WriteFile(path, []byte(huge), 0o644))

	err = run(append(args, "-count", "1", "-append", path), &stdout, &stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "reading the first line's -count")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, huge, string(after), "a refused append must leave the file as it was")
}

func TestSweepPassesTransportsThrough(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in the dry run's output
	}{
		{"not given: the suite's default", []string{"-matrix", "cpu-quick"},
			"4 configurations x 1 runs = 4 results\n<go test -c -tags ''> (1 rounds of) -test.run=^$ -test.bench=^BenchmarkServer$ -test.count=1 -test.benchtime=20x -backends=cpu -batches=1,8 -workers=1,2 -pipelines=serial -precisions=fp32 -graphs=off -devices=1 -loads=burst\n"},
		{"overridden", []string{"-matrix", "cpu-quick", "-transports", "inproc,grpc-shm"},
			"8 configurations x 1 runs = 8 results\n<go test -c -tags ''> (1 rounds of) -test.run=^$ -test.bench=^BenchmarkServer$ -test.count=1 -test.benchtime=20x -backends=cpu -batches=1,8 -workers=1,2 -pipelines=serial -precisions=fp32 -graphs=off -devices=1 -loads=burst -transports=inproc,grpc-shm\n"},
		{"the batching matrix", []string{"-matrix", "batching"},
			"6 configurations x 1 runs = 6 results\n<go test -c -tags 'cuda'> (1 rounds of) -test.run=^$ -test.bench=^BenchmarkServer$ -test.count=1 -test.benchtime=600x -backends=cuda -batches=1 -workers=2,4,8 -pipelines=overlap -precisions=fp16 -graphs=on -devices=1 -batching=off,on -loads=burst\n"},
		{"the transports matrix", []string{"-matrix", "transports"},
			"15 configurations x 1 runs = 15 results\n<go test -c -tags 'cuda'> (1 rounds of) -test.run=^$ -test.bench=^BenchmarkServer$ -test.count=1 -test.benchtime=200x -backends=cuda -batches=1,32,256 -workers=2 -pipelines=overlap -precisions=fp16 -graphs=on -devices=1 -loads=closed -transports=inproc,grpc,http,grpc-shm,http-shm\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.NoError(t, run(append(tc.args, "-count", "1", "-n"), &stdout, &stderr), "stderr: %s", stderr.String())
			assert.Equal(t, tc.want, stdout.String())
		})
	}
}

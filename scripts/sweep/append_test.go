package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAppendRealSuite checks -append against the config lines the real suite
// prints, not the fake's: it builds the root test binary and sweeps the tiny
// model for one request per run.
func TestAppendRealSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the root test binary")
	}
	root, err := moduleRoot()
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "root.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Dir = root
	built, err := build.CombinedOutput()
	require.NoError(t, err, "go test -c: %s", built)

	out := t.TempDir()
	args := func(extra ...string) []string {
		return append([]string{"-matrix", "cpu-quick", "-batches", "1", "-workers", "1", "-benchtime", "1x",
			"-bin", bin, "-out", out, "-machine", "ci", "-commit", "abc123", "-count", "1"}, extra...)
	}
	tiny := []string{"--", "-model=tiny", "-size=64x64"}
	var stdout, stderr bytes.Buffer
	t.Setenv("GOMAXPROCS", "1")
	require.NoError(t, run(args(tiny...), &stdout, &stderr), "stderr: %s", stderr.String())
	path := filepath.Join(out, "ci", "cpu-quick.txt")

	// The same setup appends.
	require.NoError(t, run(args(append([]string{"-append", path}, tiny...)...), &stdout, &stderr), "stderr: %s", stderr.String())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	text := string(data)
	assert.True(t, strings.HasPrefix(text, "# sweep -matrix cpu-quick -count 2 "), "header: %q", text[:min(len(text), 60)])
	assert.Equal(t, 2, strings.Count(text, "\nBenchmarkServer/"), "results after appending")
	assert.Equal(t, 1, strings.Count(text, "\ngomaxprocs: "), "appended rounds must not repeat config lines")

	// Other setups are refused: flags after -- before running (sweep-args:),
	// and the suite's own lines (model:, size:, gomaxprocs:...) after.
	tests := []struct {
		name       string
		gomaxprocs string
		extra      []string
		want       string
	}{
		{"ResNet-18 250x250 onto tiny 64x64", "1", []string{"-append", path},
			`sweep-args: line is "-model=tiny -size=64x64" in the file but "none" in this sweep`},
		{"tiny 32x32 onto tiny 64x64", "1", []string{"-append", path, "--", "-model=tiny", "-size=32x32"},
			`sweep-args: line is "-model=tiny -size=64x64" in the file but "-model=tiny -size=32x32" in this sweep`},
		{"another GOMAXPROCS", "2", append([]string{"-append", path}, tiny...),
			`gomaxprocs: line is "1" in the file but "2" in this sweep`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tt.gomaxprocs)
			err := run(args(tt.extra...), &stdout, &stderr)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, text, string(after), "a refused append must leave the file as it was")
}

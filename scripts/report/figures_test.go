package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixtureSpecs are headline rows over the fixture's records: a best of two
// configurations with the best of two anchors beside it, a latency (lowest
// is best) and a record without a README.
var fixtureSpecs = []figureSpec{
	{
		label: "GPU, in process, batch 32", record: "results/gpu-x/record-abc1234",
		file: "bench.txt", filter: "/batch:32 /transport:inproc", unit: "samples/s",
		how: "bursts of 100 requests",
		beside: []besideSpec{
			{"PyTorch, best loop", "torch.txt", "/batch:32"},
			{"ours, 1 worker", "bench.txt", "/batch:32 /transport:inproc /workers:1"},
		},
	},
	{
		label: "GPU, batch-1 latency p50, in process", record: "results/gpu-x/record-abc1234",
		file: "bench.txt", filter: "/batch:1 /transport:inproc", unit: "p50-latency-ns",
		how: "one request at a time",
	},
	{
		label: "CPU, batch 8", record: "results/gpu-x/nohead",
		file: "data.txt", filter: "/batch:8", unit: "samples/s",
		how: "one burst",
	},
}

func TestHeadlineGolden(t *testing.T) {
	root := fixture(t)
	var stdout, stderr bytes.Buffer
	args := []string{"-root", root, "-o", "results/HEADLINE.md", "-readme", "README.md"}
	require.NoError(t, runHeadline(args, &stdout, &stderr, fixtureSpecs))
	assert.Equal(t, "results/HEADLINE.md\nREADME.md\n", stdout.String())

	got, err := os.ReadFile(filepath.Join(root, "results", "HEADLINE.md"))
	require.NoError(t, err)
	golden(t, "headline-golden.md", got)

	// The README's block holds the same table with links from the root;
	// the text around it is kept.
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	golden(t, "headline-readme-golden.md", readme)
	assert.NotContains(t, string(readme), "stale")
	assert.Contains(t, string(readme), "](results/gpu-x/record-abc1234/README.md)")
	assert.Contains(t, string(got), "](gpu-x/record-abc1234/README.md)")

	// Everything written is current; the links resolve.
	require.NoError(t, runHeadline(append(args, "-check"), &stdout, &stderr, fixtureSpecs))
	broken, err := brokenLinks(root)
	require.NoError(t, err)
	assert.Empty(t, broken)

	// Without -o or -readme the table goes to stdout.
	stdout.Reset()
	require.NoError(t, runHeadline([]string{"-root", root}, &stdout, &stderr, fixtureSpecs))
	assert.True(t, strings.HasPrefix(stdout.String(), "| figure | this server |"), stdout.String())
}

func TestHeadlineCheck(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, root string)
		args   []string
		want   string // on stderr or in the error; "" when the check passes
	}{
		{"current", func(*testing.T, string) {}, nil, ""},
		{"an edited block", func(t *testing.T, root string) {
			md := readFile(t, root, "README.md")
			write(t, root, "README.md", strings.Replace(md, "60,000 samples/s", "60,001 samples/s", 1))
		}, nil, "README.md: the headline block is not what the records give"},
		{"a changed record", func(t *testing.T, root string) {
			data := readFile(t, root, "results/gpu-x/nohead/data.txt")
			write(t, root, "results/gpu-x/nohead/data.txt", strings.Replace(data, "55.5 samples/s", "56.5 samples/s", 1))
		}, nil, "results/HEADLINE.md is not what the records give"},
		{"markers gone: nothing to check", func(t *testing.T, root string) {
			write(t, root, "README.md", "# no table\n")
		}, nil, ""},
		{"two begin markers", func(t *testing.T, root string) {
			write(t, root, "README.md", headlineBegin+"\n"+headlineBegin+"\n"+headlineEnd+"\n")
		}, nil, "want one <!-- headline:begin --> and one <!-- headline:end -->, have 2 and 1"},
		{"end before begin", func(t *testing.T, root string) {
			write(t, root, "README.md", headlineEnd+"\n"+headlineBegin+"\n")
		}, nil, "comes before"},
		{"-check alone", func(*testing.T, string) {}, []string{"-check"}, "-check needs -o or -readme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t)
			var stdout, stderr bytes.Buffer
			args := []string{"-root", root, "-o", "results/HEADLINE.md", "-readme", "README.md"}
			require.NoError(t, runHeadline(args, &stdout, &stderr, fixtureSpecs))
			tt.change(t, root)
			if tt.args != nil {
				args = []string{"-root", root}
			}
			err := runHeadline(append(append(args, tt.args...), "-check"), &stdout, &stderr, fixtureSpecs)
			if tt.want == "" {
				require.NoError(t, err, stderr.String())
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error()+stderr.String(), tt.want)
		})
	}
}

func TestHeadlineErrors(t *testing.T) {
	spec := func(file, filter, unit string) []figureSpec {
		return []figureSpec{{label: "row", record: "results/gpu-x/record-abc1234", file: file, filter: filter, unit: unit}}
	}
	tests := []struct {
		name  string
		args  []string
		specs []figureSpec
		want  string
	}{
		{"no result matches", nil, spec("bench.txt", "/batch:64", "samples/s"), `no result matches "/batch:64" in samples/s`},
		{"no such unit", nil, spec("bench.txt", "*", "images/s"), "no result matches"},
		{"bad filter", nil, spec("bench.txt", "/batch:(", "samples/s"), "filter"},
		{"missing file", nil, spec("gone.txt", "*", "samples/s"), "gone.txt"},
		{"README without markers", []string{"-readme", "docs/GUIDE.md"}, fixtureSpecs, "docs/GUIDE.md has no <!-- headline:begin -->"},
		{"an argument", []string{"extra"}, fixtureSpecs, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fixture(t)
			var stdout, stderr bytes.Buffer
			err := runHeadline(append([]string{"-root", root}, tt.args...), &stdout, &stderr, tt.specs)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestFormatFigure(t *testing.T) {
	tests := []struct {
		unit string
		v    float64
		want string
	}{
		{"samples/s", 82524.4, "82,524 samples/s"},
		{"samples/s", 1234567, "1,234,567 samples/s"},
		{"images/s", 280.8, "280.8 images/s"},
		{"images/s", 43.42, "43.42 images/s"},
		{"p50-latency-ns", 265_500, "0.266 ms"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, formatFigure(tt.unit, tt.v), "formatFigure(%q, %v)", tt.unit, tt.v)
	}
}

// TestRepositoryHeadline reads the repository's own records with the
// README's specs: every figure resolves and results/HEADLINE.md is current.
func TestRepositoryHeadline(t *testing.T) {
	root := filepath.Join("..", "..")
	var stdout, stderr bytes.Buffer
	err := runHeadline([]string{"-root", root, "-o", headlineMD, "-check"}, &stdout, &stderr, headlineSpecs)
	require.NoError(t, err, stderr.String())
}

// readFile returns a file under root as text.
func readFile(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	require.NoError(t, err)
	return string(b)
}

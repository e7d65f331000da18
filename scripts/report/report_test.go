package main

import (
	"bytes"
	"flag"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchproc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestReportGolden(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		golden string
		pngs   []string
	}{
		{"sweep and PyTorch side by side", []string{"testdata/sweep.txt", "testdata/pytorch.txt"}, "sweep-pytorch.md",
			[]string{"headline.png", "throughput.png", "latency.png", "stages.png"}},
		{"a matrix of 36 series, GPU utilisation not always measured", []string{"testdata/matrix.txt"}, "matrix.md",
			[]string{"headline.png", "throughput.png", "latency.png", "stages.png"}},
		{"filter to one pipeline, markdown only", []string{"-no-png", "-filter", "/pipeline:overlap /batch:(1 OR 256)", "testdata/sweep.txt"}, "overlap.md", nil},
		{"gate fixture without batch keys on the plot benchmark", []string{"-plot", "ServerOverhead", "../../testdata/gate/base.txt"}, "gate-base.md", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var stdout, stderr bytes.Buffer
			err := run(append([]string{"-o", dir}, tt.args...), &stdout, &stderr)
			require.NoError(t, err)
			assert.Empty(t, stderr.String())

			got, err := os.ReadFile(filepath.Join(dir, "report.md"))
			require.NoError(t, err)
			golden := filepath.Join("testdata", tt.golden)
			if *update {
				require.NoError(t, os.WriteFile(golden, got, 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run with -update to create the golden file")
			assert.Equal(t, string(want), string(got))

			// PNG pixels depend on font rasterisation; check that each plot
			// exists, decodes and has a sensible size instead.
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			var names []string
			for _, e := range entries {
				if filepath.Ext(e.Name()) == ".png" {
					names = append(names, e.Name())
				}
			}
			assert.ElementsMatch(t, tt.pngs, names)
			for _, name := range tt.pngs {
				f, err := os.Open(filepath.Join(dir, name))
				require.NoError(t, err)
				img, err := png.Decode(f)
				f.Close()
				require.NoError(t, err, name)
				b := img.Bounds()
				assert.Greater(t, b.Dx(), 600, "%s width", name)
				assert.Greater(t, b.Dy(), 300, "%s height", name)
				assert.Contains(t, stdout.String(), filepath.Join(dir, name))
			}
		})
	}
}

func TestReportErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no files", nil, "report: no input files"},
		{"missing file", []string{"testdata/nonexistent.txt"}, "nonexistent.txt"},
		{"nothing matches", []string{"-filter", "/backend:tpu", "testdata/sweep.txt"}, "report: no benchmark results"},
		{"bad filter", []string{"-filter", "/backend:(", "testdata/sweep.txt"}, "report: -filter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(append([]string{"-o", t.TempDir()}, tt.args...), &stdout, &stderr)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestCollectSeries(t *testing.T) {
	ds, err := read([]string{"testdata/sweep.txt", "testdata/pytorch.txt"}, mustFilter(t, "*"))
	require.NoError(t, err)
	ss := collectSeries(ds, "Server")
	var labels []string
	for _, s := range ss {
		labels = append(labels, s.label)
		for i := 1; i < len(s.groups); i++ {
			assert.Less(t, s.groups[i-1].batch, s.groups[i].batch, "series %q not sorted by batch", s.label)
		}
	}
	assert.Equal(t, []string{
		"cuda, 1 worker, serial",
		"cuda, 1 worker, overlap",
		"cuda, 2 workers, serial",
		"cuda, 2 workers, overlap",
		"cuda, 4 workers, serial",
		"cuda, 4 workers, overlap",
		"pytorch-eager, 1 worker, serial",
		"pytorch-compile, 1 worker, serial",
	}, labels)
	assert.Len(t, ss[0].groups, 5)
	assert.Len(t, ss[7].groups, 3)
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name           string
		values         []float64
		mean, std, med float64
		ciOK           bool
	}{
		{"six runs have a CI", []float64{1, 2, 3, 4, 5, 6}, 3.5, 1.8708287, 3.5, true},
		{"five runs do not", []float64{5, 1, 4, 2, 3}, 3, 1.5811388, 3, false},
		{"one run", []float64{7}, 7, 0, 7, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.values...)
			s := summarize(in)
			assert.Equal(t, tt.values, in, "summarize must not reorder its input")
			assert.InDelta(t, tt.mean, s.mean, 1e-6, "mean")
			assert.InDelta(t, tt.std, s.std, 1e-6, "std")
			assert.InDelta(t, tt.med, s.median, 1e-9, "median")
			assert.Equal(t, tt.ciOK, s.ciOK, "ciOK")
			if s.ciOK {
				assert.LessOrEqual(t, s.lo, s.median)
				assert.GreaterOrEqual(t, s.hi, s.median)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		unit string
		v    float64
		want string
	}{
		{"p50-latency-sec", 0.0213, "21.30ms"},
		{"sec/op", 2.6e-6, "2.600µs"},
		{"warmup-sec", 1.5, "1.500s"},
		{"h2d-sec", 3e-8, "30.00ns"},
		{"samples/s", 40123.4, "40.12k"},
		{"samples/s", 731.2, "731.2"},
		{"gpu-util-pct", 58.8, "58.80"},
		{"widgets/op", 0.5, "0.500"},
		{"cpu-util-pct", 0.7928, "0.793"},
		{"req/s", 0.004041, "0.00404"},
		{"samples/s", 0, "0.000"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, format(tt.unit, tt.v), "format(%q, %g)", tt.unit, tt.v)
	}
}

func TestAxisUnit(t *testing.T) {
	tests := []struct {
		unit   string
		big    float64
		factor float64
		name   string
	}{
		{"p99-latency-sec", 2.6, 1, "s"},
		{"p99-latency-sec", 0.45, 1e-3, "ms"},
		{"queue-sec", 3e-5, 1e-6, "µs"},
		{"samples/s", 54000, 1, ""},
	}
	for _, tt := range tests {
		factor, name := axisUnit(tt.unit, tt.big)
		assert.Equal(t, tt.factor, factor, "axisUnit(%q, %g) factor", tt.unit, tt.big)
		assert.Equal(t, tt.name, name, "axisUnit(%q, %g) name", tt.unit, tt.big)
	}
}

func mustFilter(t *testing.T, q string) *benchproc.Filter {
	t.Helper()
	f, err := benchproc.NewFilter(q)
	require.NoError(t, err)
	return f
}

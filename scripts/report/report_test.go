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
			[]string{"throughput.png", "latency.png", "stages.png"}},
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
		"backend=cuda, workers=1, pipeline=serial",
		"backend=cuda, workers=1, pipeline=overlap",
		"backend=cuda, workers=2, pipeline=serial",
		"backend=cuda, workers=2, pipeline=overlap",
		"backend=cuda, workers=4, pipeline=serial",
		"backend=cuda, workers=4, pipeline=overlap",
		"backend=pytorch-eager, workers=1, pipeline=serial",
		"backend=pytorch-compile, workers=1, pipeline=serial",
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

func TestScaleFor(t *testing.T) {
	tests := []struct {
		unit   string
		values []float64
		label  string
		text   string // format of values[0]
	}{
		{"p50-latency-sec", []float64{0.0213}, "p50 latency (ms)", "21.30"},
		{"sec/op", []float64{2.6e-6}, "time/op (µs)", "2.600"},
		{"warmup-sec", []float64{1.5}, "warm-up (s)", "1.500"},
		{"h2d-sec", []float64{3e-8}, "copy in (H2D) (ns)", "30.00"},
		{"samples/s", []float64{40123.4}, "samples/s", "40123"},
		{"widgets/op", []float64{0.5}, "widgets/op", "0.5000"},
	}
	for _, tt := range tests {
		t.Run(tt.unit, func(t *testing.T) {
			s := scaleFor(tt.unit, tt.values...)
			assert.Equal(t, tt.label, s.label)
			assert.Equal(t, tt.text, s.format(tt.values[0]))
		})
	}
}

func mustFilter(t *testing.T, q string) *benchproc.Filter {
	t.Helper()
	f, err := benchproc.NewFilter(q)
	require.NoError(t, err)
	return f
}

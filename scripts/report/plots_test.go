package main

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArrange(t *testing.T) {
	tests := []struct {
		name        string
		files       []string
		panels      []string // panel titles
		legend      []string
		perPanel    int
		sameStyleAs [2]string // two series labels that must share a style ("" to skip)
	}{
		{"8 series fit one legend", []string{"testdata/sweep.txt", "testdata/pytorch.txt"},
			[]string{""},
			[]string{"cuda, 1 worker, serial", "cuda, 1 worker, overlap", "cuda, 2 workers, serial", "cuda, 2 workers, overlap",
				"cuda, 4 workers, serial", "cuda, 4 workers, overlap", "pytorch-eager, 1 worker, serial", "pytorch-compile, 1 worker, serial"},
			8, [2]string{}},
		{"36 series: a panel per precision x graphs", []string{"testdata/matrix.txt"},
			[]string{"fp32, graphs off", "fp32, graphs on", "tf32, graphs off", "tf32, graphs on", "fp16, graphs off", "fp16, graphs on"},
			[]string{"1 worker, serial", "1 worker, overlap", "2 workers, serial", "2 workers, overlap", "4 workers, serial", "4 workers, overlap"},
			6, [2]string{"fp32, graphs off, 2 workers, overlap", "fp16, graphs on, 2 workers, overlap"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, err := read(tt.files, mustFilter(t, "*"))
			require.NoError(t, err)
			ss := collectSeries(ds, "Server")
			l := arrange(ss)
			var titles, legend []string
			for _, p := range l.panels {
				titles = append(titles, p.title)
				assert.Len(t, p.series, tt.perPanel, "series in panel %q", p.title)
			}
			for _, e := range l.legend {
				legend = append(legend, e.label)
			}
			assert.Equal(t, tt.panels, titles)
			assert.Equal(t, tt.legend, legend)
			for _, s := range ss {
				assert.Contains(t, l.styles, s.label, "every series has a style")
			}
			if a, b := tt.sameStyleAs[0], tt.sameStyleAs[1]; a != "" {
				require.Contains(t, l.styles, a)
				assert.Equal(t, l.styles[a], l.styles[b], "one legend entry must mean one style in every panel")
			}
			seen := map[string]string{}
			for _, e := range l.legend {
				if other, ok := seen[styleKey(e.style)]; ok {
					t.Errorf("legend entries %q and %q share a style", other, e.label)
				}
				seen[styleKey(e.style)] = e.label
			}
		})
	}
}

// styleKey tells styles apart.
func styleKey(s style) string {
	return fmt.Sprintf("%v %v %T", s.color, s.dashes, s.glyph.Shape)
}

func TestNewYAxis(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi float64
		want   yAxis
	}{
		{"a 1 % spread starts at zero, not at 50.1", 50.1, 50.8, yAxis{min: 0, max: 50.8 * 1.05}},
		{"a 20-fold range stays linear", 1000, 20000, yAxis{min: 0, max: 21000}},
		{"a wider range is logarithmic", 700, 54000, yAxis{min: 500, max: 54000 * 1.4, log: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newYAxis(tt.lo, tt.hi)
			assert.Equal(t, tt.want.log, got.log)
			assert.InDelta(t, tt.want.min, got.min, 1e-9)
			assert.InDelta(t, tt.want.max, got.max, 1e-9)
		})
	}
}

func TestLinearTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   string // labels, space-separated
	}{
		{0, 53.34, "0 10 20 30 40 50"},
		{0, 54000, "0 10k 20k 30k 40k 50k"},
		{0, 1.9, "0 0.5 1.0 1.5"},
		{0, 2500, "0 500 1000 1500 2000 2500"},
		{0, 1018, "0 200 400 600 800 1000"},
		{0, 0.0021, "0 0.0005 0.0010 0.0015 0.0020"},
		{0, 2.4e6, "0 0.5M 1.0M 1.5M 2.0M"},
	}
	for _, tt := range tests {
		var labels []string
		for _, tick := range (linearTicks{}).Ticks(tt.lo, tt.hi) {
			labels = append(labels, tick.Label)
		}
		assert.Equal(t, tt.want, strings.Join(labels, " "), "Ticks(%g, %g)", tt.lo, tt.hi)
	}
}

func TestHeadline(t *testing.T) {
	t.Run("H200 sweep and PyTorch, with the seed's figures", func(t *testing.T) {
		ds, err := read([]string{"testdata/sweep.txt", "testdata/pytorch.txt"}, mustFilter(t, "*"))
		require.NoError(t, err)
		h := headlineOf(ds, collectSeries(ds, "Server"))
		require.NotNil(t, h)
		assert.Equal(t, 6, h.ours)
		assert.Equal(t, 2, h.torch)
		assert.Empty(t, h.note)
		require.Len(t, h.refs, 2)
		var batches []int
		for _, r := range h.rows {
			batches = append(batches, r.batch)
		}
		assert.Equal(t, []int{1, 32, 64, 128, 256}, batches)
		// Batch 32: the best of six is 2 workers, overlap (the fixture's
		// medians: 49,089 against at most 48,816 for the others).
		r := h.rows[1]
		require.NotNil(t, r.ours)
		assert.Equal(t, "2 workers, overlap", r.ours.label)
		assert.InDelta(t, 49100, r.ours.median, 200)
		require.NotNil(t, r.torch)
		assert.Equal(t, "pytorch-compile", r.torch.label)
		assert.Equal(t, []float64{2691, 30400}, r.refs)
		// Batch 64: PyTorch was not measured, nor the hand-written loop.
		assert.Nil(t, h.rows[2].torch)
		assert.True(t, math.IsNaN(h.rows[2].refs[1]))
	})
	t.Run("another GPU leaves the seed's H200 figures out", func(t *testing.T) {
		ds, err := read([]string{"testdata/matrix.txt"}, mustFilter(t, "*"))
		require.NoError(t, err)
		h := headlineOf(ds, collectSeries(ds, "Server"))
		require.NotNil(t, h)
		assert.Empty(t, h.refs)
		assert.Contains(t, h.note, `measured on an H200; these results are from "NVIDIA H100 80GB HBM3"`)
		assert.Equal(t, "fp16, graphs on, 4 workers, overlap", h.rows[0].ours.label)
	})
}

func TestMeanStd(t *testing.T) {
	g := &group{values: map[string][]float64{
		"samples/s":    {100, 110, 120},
		"gpu-util-pct": {0, 50, 70},
		"warmup-sec":   {2.5},
	}}
	never := &group{values: map[string][]float64{"samples/s": {1, 2}, "gpu-util-pct": {0, 0}}}
	counted := &group{values: map[string][]float64{"gpu-util-pct": {0, 0}, "gpu-util-samples": {3, 4}}}
	tests := []struct {
		name string
		g    *group
		unit string
		want string
	}{
		{"every run", g, "samples/s", "110.0 ± 10.00"},
		{"a zero utilisation without a sample count is not measured", g, "gpu-util-pct", "60.00 ± 14.14 (2 of 3 runs)"},
		{"one run of three has no spread", g, "warmup-sec", "2.500s (1 of 3 runs)"},
		{"never measured", never, "gpu-util-pct", "n/a"},
		{"absent", never, "p50-latency-sec", "n/a"},
		{"with a sample count a zero was measured", counted, "gpu-util-pct", "0.000 ± 0.000"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, meanStd(tt.g, tt.unit), tt.name)
	}
}

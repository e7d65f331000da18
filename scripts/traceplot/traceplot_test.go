package main

import (
	"bytes"
	"flag"
	"fmt"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/trace"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// writeTrace records two CPU workers running an overlapped pipeline (the
// copy-in of one batch runs while the previous one computes) and writes the
// trace to dir/trace.json.
func writeTrace(t *testing.T, dir string) string {
	t.Helper()
	base := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	at := func(us int) time.Time { return base.Add(time.Duration(us) * time.Microsecond) }
	r := trace.New()
	id := uint64(0)
	for w := range 2 {
		for k := range 4 {
			start := 20 + 100*k + 30*w
			id++
			r.Batch(&trace.Batch{
				Worker: w, Device: trace.CPU,
				Requests:  []trace.Request{{ID: id, Images: 2, Sent: at(5 * int(id)), Admitted: at(5 * int(id))}},
				Started:   at(start),
				CopyIn:    trace.Span{Start: at(start), End: at(start + 20)},
				Compute:   trace.Span{Start: at(start + 20), End: at(start + 120)},
				CopyOut:   trace.Span{Start: at(start + 120), End: at(start + 130)},
				Delivered: at(start + 135),
			})
		}
	}
	path := filepath.Join(dir, "trace.json")
	require.NoError(t, r.WriteFile(path))
	return path
}

// dump describes a chart as text, for the golden file.
func dump(c *chart) string {
	var b strings.Builder
	fmt.Fprintf(&b, "window %g..%g us, legend %v\n", c.from, c.to, c.names)
	for _, r := range c.rows {
		fmt.Fprintf(&b, "%-28s", r.th.label())
		for _, e := range r.boxes {
			fmt.Fprintf(&b, " %s@%g+%g", e.name, e.ts, e.dur)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	in := writeTrace(t, t.TempDir())
	tests := []struct {
		name string
		args []string
	}{
		{"all", nil},
		{"window", []string{"-from", "100", "-to", "250"}},
		{"workers", []string{"-threads", `worker 1 (h2d|compute)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "t.png")
			args := append(append([]string{"-o", out, "-width", "900", "-title", "synthetic"}, tt.args...), in)
			o, err := parseArgs(args, &bytes.Buffer{})
			require.NoError(t, err)
			f, err := os.Open(in)
			require.NoError(t, err)
			defer f.Close()
			tr, err := readTrace(f)
			require.NoError(t, err)
			got := dump(newChart(tr, o))

			golden := filepath.Join("testdata", tt.name+".txt")
			var stdout bytes.Buffer
			require.NoError(t, run(args, &stdout, &bytes.Buffer{}))
			if *update {
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
				png, err := os.ReadFile(out)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join("testdata", tt.name+".png"), png, 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run go test -update to create it")
			assert.Equal(t, string(want), got)
			assert.Contains(t, stdout.String(), "pixels")
		})
	}
}

// TestPixels checks that the PNG shows what the JSON holds: a compute box of
// worker 0 is green where the trace puts it, and the overlapping copy-in of
// worker 1 is blue at the same time on its own row.
func TestPixels(t *testing.T) {
	dir := t.TempDir()
	in := writeTrace(t, dir)
	out := filepath.Join(dir, "t.png")
	args := []string{"-o", out, "-width", "1000", in}
	require.NoError(t, run(args, &bytes.Buffer{}, &bytes.Buffer{}))
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)

	o, err := parseArgs(args, &bytes.Buffer{})
	require.NoError(t, err)
	fj, err := os.Open(in)
	require.NoError(t, err)
	defer fj.Close()
	tr, err := readTrace(fj)
	require.NoError(t, err)
	c := newChart(tr, o)
	left, right := c.labelWidth(), o.width-margin
	rowOf := func(label string) int {
		for i, r := range c.rows {
			if r.th.label() == label {
				return i
			}
		}
		t.Fatalf("no row %q in %v", label, dump(c))
		return -1
	}
	// Worker 0's first compute runs 20..120 µs after its copy-in starts (at
	// 20 µs after the first admission, 5 µs): 35..135 µs on the axis.
	// Worker 1's first copy-in runs 45..65 µs: inside it.
	at := func(label string, us float64) color.Color {
		y := headerH + rowOf(label)*rowPitch + rowH/2
		return img.At(int(c.x(us, left, right)), y)
	}
	assert.Equal(t, colorOf("compute"), toRGBA(at("cpu: worker 0 compute", 55)))
	assert.Equal(t, colorOf("h2d"), toRGBA(at("cpu: worker 1 h2d", 55)))
	assert.NotEqual(t, colorOf("h2d"), toRGBA(at("cpu: worker 1 h2d", 80)), "after the copy-in")
}

func toRGBA(c color.Color) color.RGBA {
	r, g, b, a := c.RGBA()
	return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
}

func TestArgs(t *testing.T) {
	in := writeTrace(t, t.TempDir())
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no file", nil, "want exactly one trace file"},
		{"narrow", []string{"-width", "10", in}, "below 200"},
		{"empty window", []string{"-from", "5", "-to", "5", in}, "empty window"},
		{"bad regexp", []string{"-threads", "(", in}, "-threads"},
		{"missing", []string{filepath.Join(t.TempDir(), "none.json")}, "no such file"},
		{"nothing drawn", []string{"-threads", "nope", "-o", filepath.Join(t.TempDir(), "x.png"), in}, "no complete events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(tt.args, &bytes.Buffer{}, &bytes.Buffer{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.True(t, strings.HasPrefix(err.Error(), "traceplot: "), "error %q lacks the prefix", err)
		})
	}
}

func TestReadTraceFormats(t *testing.T) {
	tests := []struct {
		name, json string
		wantLabels []string
		wantErr    string
	}{
		{"array, string ids", `[{"name":"compute","ph":"X","ts":1,"dur":2,"pid":"a","tid":"b"}]`,
			[]string{"pid a: tid b"}, ""},
		{"object with metadata after events", `{"traceEvents":[
			{"name":"h2d","ph":"X","ts":0,"dur":1,"pid":3,"tid":7},
			{"name":"B ignored","ph":"B","ts":0,"pid":3,"tid":7},
			{"name":"thread_name","ph":"M","pid":3,"tid":7,"args":{"name":"worker 0 h2d"}},
			{"name":"process_name","ph":"M","pid":3,"tid":0,"args":{"name":"gpu 1"}}]}`,
			[]string{"gpu 1: worker 0 h2d"}, ""},
		{"negative dur", `[{"name":"x","ph":"X","ts":0,"dur":-1,"pid":1,"tid":1}]`, nil, "negative dur"},
		{"not json", `{"traceEvents": [`, nil, "not a trace event file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := readTrace(strings.NewReader(tt.json))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			var labels []string
			for _, r := range newChart(tr, options{width: 400, to: math.Inf(1)}).rows {
				labels = append(labels, r.th.label())
			}
			assert.Equal(t, tt.wantLabels, labels)
		})
	}
}

func TestTicks(t *testing.T) {
	tests := []struct {
		span     float64
		n        int
		wantStep float64
		t        float64
		want     string
	}{
		{span: 1000, n: 10, wantStep: 100, t: 300, want: "300 us"},
		{span: 1000, n: 4, wantStep: 500, t: 500, want: "500 us"},
		{span: 3, n: 10, wantStep: 0.5, t: 1.5, want: "1.5 us"},
		{span: 25000, n: 10, wantStep: 5000, t: 15000, want: "15 ms"},
		{span: 4000, n: 10, wantStep: 500, t: 1500, want: "1500 us"},
		{span: 12e3, n: 10, wantStep: 2000, t: 4000, want: "4 ms"},
		{span: 3e6, n: 3, wantStep: 1e6, t: 2e6, want: "2 s"},
	}
	for _, tt := range tests {
		step := tickStep(tt.span, tt.n)
		assert.InDelta(t, tt.wantStep, step, 1e-9, "tickStep(%g, %d)", tt.span, tt.n)
		assert.Equal(t, tt.want, formatTime(tt.t, step), "formatTime(%g, %g)", tt.t, step)
	}
}

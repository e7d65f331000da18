package main

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// reference is a published throughput to draw next to ours.
type reference struct {
	label   string
	gpu     string          // the GPU it was measured on, as in a gpu: line
	samples map[int]float64 // samples/s by batch size
}

// seedReferences are cited from docs/SEED.md (the account of the seed this
// project ports), section "The seed measured on an H200": the seed's
// reference server unchanged (100 requests after one warm-up, compile off, 4
// workers), and the hand-written PyTorch serving loop it describes (fp16
// channels-last forward in a CUDA graph, three streams, three batches in
// flight).
var seedReferences = []reference{
	{"seed server, 4 workers (docs/SEED.md, H200)", "H200", map[int]float64{1: 81, 32: 2691, 64: 3909, 128: 3914, 256: 5123}},
	{"hand-written PyTorch loop (docs/SEED.md, H200)", "H200", map[int]float64{1: 2636, 32: 30400, 256: 40400}},
}

// pick is the best configuration at one batch size.
type pick struct {
	label  string
	median float64 // samples/s
	runs   int
}

// headlineRow is one batch size of the headline.
type headlineRow struct {
	batch       int
	ours, torch *pick     // nil when there is none
	refs        []float64 // by headline.refs; NaN where a reference has no figure
}

// headline compares, at each batch size, our best configuration (the
// highest median samples/s) with PyTorch's best (results whose back-end is
// pytorch-*) and with the references measured on the same GPU.
type headline struct {
	rows        []headlineRow
	refs        []reference
	ours, torch int    // configurations compared
	oursFixed   string // the settings all of ours share (precision, graphs, back-end)
	note        string // why references are left out, if they are
}

// isTorch reports whether a series is PyTorch's (scripts/pytorch_bench.py).
func isTorch(s series) bool { return strings.HasPrefix(s.values["backend"], "pytorch") }

// headlineOf picks the best configurations of ss. It returns nil when no
// configuration measured samples/s.
func headlineOf(ds *dataset, ss []series) *headline {
	h := &headline{}
	var ours, torch []series
	for _, s := range ss {
		if !hasUnit([]series{s}, "samples/s") {
			continue
		}
		if isTorch(s) {
			torch = append(torch, s)
		} else {
			ours = append(ours, s)
		}
	}
	if len(ours) == 0 && len(torch) == 0 {
		return nil
	}
	h.ours, h.torch = len(ours), len(torch)
	if len(ours) > 0 {
		var fixed []string
		for _, k := range []string{"backend", "precision", "graphs"} {
			if !slices.Contains(varyingKeys(ours, seriesKeyNames), k) {
				fixed = append(fixed, k)
			}
		}
		h.oursFixed = describe(ours[0].values, fixed)
	}
	gpu := ""
	for _, c := range ds.config {
		if c.key == "gpu" {
			gpu = c.value
		}
	}
	for _, r := range seedReferences {
		if strings.Contains(gpu, r.gpu) && !strings.Contains(gpu, ",") {
			h.refs = append(h.refs, r)
		}
	}
	if len(h.refs) == 0 {
		h.note = fmt.Sprintf("The seed's figures (docs/SEED.md) were measured on an H200; these results are from %q, so they are not shown.", gpu)
	}
	for _, b := range batchSizes(ss) {
		row := headlineRow{batch: b, ours: best(ours, b), torch: best(torch, b)}
		for _, r := range h.refs {
			v, ok := r.samples[b]
			if !ok {
				v = math.NaN()
			}
			row.refs = append(row.refs, v)
		}
		h.rows = append(h.rows, row)
	}
	return h
}

// best returns the configuration of ss with the highest median samples/s at
// batch b, labelled by the keys that vary among ss, or nil.
func best(ss []series, b int) *pick {
	varying := varyingKeys(ss, seriesKeyNames)
	var out *pick
	for _, s := range ss {
		for _, g := range s.groups {
			st, ok := g.stat("samples/s")
			if g.batch != b || !ok || out != nil && st.median <= out.median {
				continue
			}
			keys := varying
			if isTorch(s) && !slices.Contains(keys, "backend") {
				keys = append([]string{"backend"}, keys...)
			}
			label := describe(s.values, keys)
			if label == "" {
				label = describe(s.values, seriesKeyNames)
			}
			out = &pick{label: label, median: st.median, runs: st.n}
		}
	}
	return out
}

// drawHeadline draws the headline: samples/s against batch size of our best
// configuration at each batch size, PyTorch's best and the references. When
// the best configuration changes with the batch size, each point carries a
// letter that the legend explains.
func drawHeadline(path string, h *headline) (bool, error) {
	if h == nil {
		return false, nil
	}
	var batches []series
	for _, row := range h.rows {
		batches = append(batches, series{groups: []*group{{batch: row.batch}}})
	}
	p := newPlot("", "throughput (samples/s)", batches)
	var legend []legendEntry
	lo, hi := math.Inf(1), 0.0
	letter := 'A'
	addLine := func(label string, st style, xys plotter.XYs, names []string) error {
		if len(xys) == 0 {
			return nil
		}
		for _, xy := range xys {
			lo, hi = math.Min(lo, xy.Y), math.Max(hi, xy.Y)
		}
		ln, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		ln.Color, ln.Width, ln.Dashes = st.color, vg.Points(1.8), st.dashes
		pts.GlyphStyle = st.glyph
		p.Add(ln, pts)
		// One configuration throughout is named in the legend; else
		// each run of batch sizes with one configuration gets a letter.
		runs := runsOf(names)
		if len(runs) == 1 && names[0] != "" {
			label += ": " + names[0]
		}
		legend = append(legend, legendEntry{label, []plot.Thumbnailer{ln, pts}})
		if len(runs) < 2 {
			return nil
		}
		marks := make([]string, len(xys))
		for _, r := range runs {
			for i := r[0]; i <= r[1]; i++ {
				marks[i] = string(letter)
			}
			legend = append(legend, legendEntry{fmt.Sprintf("   %c: %s (batch %s)", letter, names[r[0]], batchList(xys, r)), nil})
			letter++
		}
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: marks})
		if err != nil {
			return err
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i] = smallText(st.color)
			labels.TextStyle[i].XAlign = draw.XCenter
		}
		labels.Offset = vg.Point{Y: vg.Points(6)}
		p.Add(labels)
		return nil
	}

	var xys plotter.XYs
	var names []string
	fewest, most := 0, 0
	for _, row := range h.rows {
		if row.ours != nil {
			xys = append(xys, plotter.XY{X: float64(row.batch), Y: row.ours.median})
			names = append(names, row.ours.label)
			if fewest == 0 || row.ours.runs < fewest {
				fewest = row.ours.runs
			}
			most = max(most, row.ours.runs)
		}
	}
	label := "this server"
	if h.oursFixed != "" {
		label += " (" + h.oursFixed + ")"
	}
	if err := addLine(fmt.Sprintf("%s, best of %d configurations", label, h.ours), makeStyle(0, 0), xys, names); err != nil {
		return false, err
	}
	xys, names = nil, nil
	for _, row := range h.rows {
		if row.torch != nil {
			xys = append(xys, plotter.XY{X: float64(row.batch), Y: row.torch.median})
			names = append(names, row.torch.label)
			if fewest == 0 || row.torch.runs < fewest {
				fewest = row.torch.runs
			}
			most = max(most, row.torch.runs)
		}
	}
	if err := addLine(fmt.Sprintf("PyTorch (pytorch_bench.py), best of %d", h.torch), makeStyle(3, 0), xys, names); err != nil {
		return false, err
	}
	for i, r := range h.refs {
		xys, names = nil, nil
		for _, row := range h.rows {
			if v := row.refs[i]; !math.IsNaN(v) {
				xys = append(xys, plotter.XY{X: float64(row.batch), Y: v})
				names = append(names, "")
			}
		}
		st := makeStyle(0, 1+i)
		grey := color.Gray{Y: uint8(40 + 70*i)}
		st.color, st.glyph.Color = grey, grey
		if err := addLine(r.label, st, xys, names); err != nil {
			return false, err
		}
	}
	newYAxis(lo, hi).apply(p)
	if newYAxis(lo, hi).log {
		p.Y.Label.Text += ", log scale"
	}
	title := "Best configuration at each batch size (highest median samples/s"
	if most > 0 {
		runs := fmt.Sprintf("%d runs", most)
		if fewest != most {
			runs = fmt.Sprintf("%d-%d runs", fewest, most)
		}
		title += ", median of " + runs
	}
	title += ")"
	switch {
	case h.ours > 0 && h.torch > 0 && len(h.refs) > 0:
		title += " against PyTorch and the seed"
	case h.torch > 0 && len(h.refs) > 0:
		title += " against the seed"
	case h.ours > 0 && h.torch > 0:
		title += " against PyTorch"
	case len(h.refs) > 0:
		title += " against the seed"
	}
	return true, saveWithLegend(path, title, [][]*plot.Plot{{p}}, 1.5*panelWidth, 1.3*panelHeight, legend)
}

// runsOf splits names into runs of equal neighbours: index ranges [first,
// last].
func runsOf(names []string) [][2]int {
	var out [][2]int
	for i, n := range names {
		if i > 0 && n == names[i-1] {
			out[len(out)-1][1] = i
			continue
		}
		out = append(out, [2]int{i, i})
	}
	return out
}

// batchList names the batch sizes of xys[r[0]..r[1]]: "1", "1, 32" or
// "64-256".
func batchList(xys plotter.XYs, r [2]int) string {
	first, last := strconv.Itoa(int(xys[r[0]].X)), strconv.Itoa(int(xys[r[1]].X))
	switch r[1] - r[0] {
	case 0:
		return first
	case 1:
		return first + ", " + last
	}
	return first + "-" + last
}

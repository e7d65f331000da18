package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchproc"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// series is one line of a plot: the configurations that differ only in
// batch size, sorted by batch size.
type series struct {
	label  string
	groups []*group
}

// collectSeries returns the groups of the benchmark named base that have a
// batch size, split into series by every other key.
func collectSeries(ds *dataset, base string) []series {
	var keys []benchproc.Key
	byKey := map[benchproc.Key][]*group{}
	for _, g := range ds.groups {
		if g.base != base || g.batch <= 0 {
			continue
		}
		if _, ok := byKey[g.series]; !ok {
			keys = append(keys, g.series)
		}
		byKey[g.series] = append(byKey[g.series], g)
	}
	fields := benchproc.NonSingularFields(keys)
	out := make([]series, 0, len(keys))
	for _, k := range keys {
		var parts []string
		for _, f := range fields {
			parts = append(parts, strings.TrimPrefix(f.Name, "/")+"="+k.Get(f))
		}
		label := strings.Join(parts, ", ")
		if label == "" {
			label = base
		}
		gs := byKey[k]
		slices.SortFunc(gs, func(a, b *group) int { return a.batch - b.batch })
		out = append(out, series{label: label, groups: gs})
	}
	return out
}

// Figure sizes.
const (
	dpi          = 110
	panelWidth   = 6 * vg.Inch
	panelHeight  = 4.2 * vg.Inch
	stagesHeight = 3.2 * vg.Inch
)

// writePlots draws the plots of the benchmark named base into dir and returns
// the file names it wrote (relative to dir). It writes nothing when no result
// of that benchmark has a batch size.
func writePlots(dir string, ds *dataset, base string) ([]string, error) {
	ss := collectSeries(ds, base)
	if len(ss) == 0 {
		return nil, nil
	}
	var written []string
	type figure struct {
		name string
		draw func(string, []series) (bool, error)
	}
	for _, f := range []figure{
		{"throughput.png", drawThroughput},
		{"latency.png", drawLatency},
		{"stages.png", drawStages},
	} {
		ok, err := f.draw(filepath.Join(dir, f.name), ss)
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", f.name, err)
		}
		if ok {
			written = append(written, f.name)
		}
	}
	return written, nil
}

// lineStyle gives series i its colour, dash pattern and glyph.
func lineStyle(i int) (color.Color, []vg.Length, draw.GlyphStyle) {
	colors := []color.Color{
		color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff},
		color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
		color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
		color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
	}
	dashes := [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}}
	shapes := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.RingGlyph{}, draw.PlusGlyph{}}
	c := colors[i%len(colors)]
	return c, dashes[(i/len(colors))%len(dashes)], draw.GlyphStyle{Color: c, Radius: vg.Points(3), Shape: shapes[i%len(shapes)]}
}

// linePlot adds one line per series of the median of unit against batch
// size, with the 95 % confidence interval as error bars, and returns the
// legend entries.
func linePlot(p *plot.Plot, ss []series, unit string, factor float64, dashed bool) ([]legendEntry, error) {
	var entries []legendEntry
	for i, s := range ss {
		var xys plotter.XYs
		var errs plotter.YErrors
		for _, g := range s.groups {
			st, ok := g.stat(unit)
			if !ok || st.median <= 0 {
				continue
			}
			m := st.median / factor
			xys = append(xys, plotter.XY{X: float64(g.batch), Y: m})
			e := struct{ Low, High float64 }{}
			if st.ciOK {
				e.Low, e.High = m-st.lo/factor, st.hi/factor-m
			}
			errs = append(errs, e)
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		c, dash, glyph := lineStyle(i)
		line.Color, line.Width, line.Dashes = c, vg.Points(1.5), dash
		if dashed {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		points.GlyphStyle = glyph
		bars, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{xys, errs})
		if err != nil {
			return nil, err
		}
		bars.Color = c
		p.Add(line, points, bars)
		entries = append(entries, legendEntry{s.label, []plot.Thumbnailer{line, points}})
	}
	return entries, nil
}

// legendEntry is one line of a legend drawn beside the plots.
type legendEntry struct {
	label  string
	thumbs []plot.Thumbnailer
}

// batchSizes returns the batch sizes of every series' groups, sorted, once each.
func batchSizes(ss []series) []int {
	var batches []int
	for _, s := range ss {
		for _, g := range s.groups {
			if !slices.Contains(batches, g.batch) {
				batches = append(batches, g.batch)
			}
		}
	}
	slices.Sort(batches)
	return batches
}

// newPlot returns a plot with our axes: log-scaled batch sizes on x.
func newPlot(title, ylabel string, ss []series) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "batch size (images per request, log scale)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	batches := batchSizes(ss)
	var ticks plot.ConstantTicks
	for _, b := range batches {
		ticks = append(ticks, plot.Tick{Value: float64(b), Label: strconv.Itoa(b)})
	}
	p.X.Tick.Marker = ticks
	if len(batches) > 0 {
		p.X.Min, p.X.Max = float64(batches[0])/1.3, float64(batches[len(batches)-1])*1.3
	}
	p.Add(plotter.NewGrid())
	return p
}

// useLogY switches p's y axis to a log scale when its data span more than a
// factor of 20, and returns whether it did.
func useLogY(p *plot.Plot, unitLabel string) bool {
	if p.Y.Min <= 0 || p.Y.Max/p.Y.Min <= 20 {
		return false
	}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	p.Y.Label.Text = unitLabel + ", log scale"
	return true
}

// drawThroughput draws samples/s against batch size.
func drawThroughput(path string, ss []series) (bool, error) {
	unit := "samples/s"
	if !hasUnit(ss, unit) {
		return false, nil
	}
	label := "throughput (samples/s)"
	p := newPlot("Throughput vs batch size (median, 95 % CI)", label, ss)
	entries, err := linePlot(p, ss, unit, 1, false)
	if err != nil {
		return false, err
	}
	useLogY(p, label)
	return true, save(path, [][]*plot.Plot{{p}}, panelWidth, panelHeight, "", entries)
}

// drawLatency draws p50 (left) and p99 (right) latency against batch size on
// a shared y axis.
func drawLatency(path string, ss []series) (bool, error) {
	if !hasUnit(ss, "p50-latency-sec") && !hasUnit(ss, "p99-latency-sec") {
		return false, nil
	}
	var all []float64
	for _, s := range ss {
		for _, g := range s.groups {
			all = append(all, g.values["p50-latency-sec"]...)
			all = append(all, g.values["p99-latency-sec"]...)
		}
	}
	factor, unitName := axisUnit("p50-latency-sec", slices.Max(all))
	var panels []*plot.Plot
	var entries []legendEntry
	for _, q := range []string{"p50", "p99"} {
		label := q + " latency (" + unitName + ")"
		p := newPlot(q+" latency vs batch size (median, 95 % CI)", label, ss)
		e, err := linePlot(p, ss, q+"-latency-sec", factor, false)
		if err != nil {
			return false, err
		}
		if len(e) > len(entries) {
			entries = e
		}
		panels = append(panels, p)
	}
	// One y range for both panels, so p50 and p99 compare by eye.
	lo, hi := math.Min(panels[0].Y.Min, panels[1].Y.Min), math.Max(panels[0].Y.Max, panels[1].Y.Max)
	for _, p := range panels {
		p.Y.Min, p.Y.Max = lo, hi
		useLogY(p, p.Y.Label.Text)
	}
	return true, save(path, [][]*plot.Plot{panels}, panelWidth, panelHeight, "", entries)
}

// stages are the per-stage mean times of a request, stacked bottom to top.
var stages = []struct {
	unit, label string
	color       color.Color
}{
	{"queue-sec", "queue", color.RGBA{0xb0, 0xb0, 0xb0, 0xff}},
	{"h2d-sec", "copy in (H2D)", color.RGBA{0x1f, 0x77, 0xb4, 0xff}},
	{"compute-sec", "compute", color.RGBA{0xff, 0x7f, 0x0e, 0xff}},
	{"d2h-sec", "copy out (D2H)", color.RGBA{0x2c, 0xa0, 0x2c, 0xff}},
}

// drawStages draws, per batch size, one horizontal stacked bar per series:
// the mean time a request spends queued, copying in, computing and copying
// out.
func drawStages(path string, ss []series) (bool, error) {
	any := false
	for _, st := range stages {
		any = any || hasUnit(ss, st.unit)
	}
	if !any {
		return false, nil
	}
	batches := batchSizes(ss)
	// NominalY puts the first label at the bottom: reverse, so the
	// series read top to bottom in legend order.
	labels := make([]string, len(ss))
	for i, s := range ss {
		labels[len(ss)-1-i] = s.label
	}
	var panels []*plot.Plot
	var entries []legendEntry
	for _, batch := range batches {
		// Mean of each stage per series (0 where a series lacks the batch).
		vals := make([][]float64, len(stages))
		for k := range vals {
			vals[k] = make([]float64, len(ss))
		}
		for si := range ss {
			for k, st := range stages {
				for _, g := range ss[si].groups {
					if g.batch != batch {
						continue
					}
					if s, ok := g.stat(st.unit); ok {
						vals[k][len(ss)-1-si] = s.mean
					}
				}
			}
		}
		// Left: every stage. Right: without the queue, whose wait under a
		// burst dwarfs the work itself.
		for _, withQueue := range []bool{true, false} {
			first, title := 0, fmt.Sprintf("batch %d: mean time per request", batch)
			if !withQueue {
				first, title = 1, fmt.Sprintf("batch %d: service time (no queue)", batch)
			}
			var totals []float64
			for i := range ss {
				t := 0.0
				for k := first; k < len(stages); k++ {
					t += vals[k][i]
				}
				totals = append(totals, t)
			}
			factor, unitName := axisUnit("queue-sec", slices.Max(totals))
			p := plot.New()
			p.Title.Text = title
			p.X.Label.Text = "time (" + unitName + ")"
			p.Add(plotter.NewGrid())
			var below *plotter.BarChart
			for k := first; k < len(stages); k++ {
				st := stages[k]
				scaled := make(plotter.Values, len(vals[k]))
				for i, v := range vals[k] {
					scaled[i] = v / factor
				}
				bar, err := plotter.NewBarChart(scaled, vg.Points(14))
				if err != nil {
					return false, err
				}
				bar.Horizontal = true
				bar.Color = st.color
				bar.LineStyle.Width = 0
				if below != nil {
					bar.StackOn(below)
				}
				below = bar
				p.Add(bar)
				if withQueue && len(entries) < len(stages) {
					entries = append(entries, legendEntry{st.label, []plot.Thumbnailer{bar}})
				}
			}
			p.NominalY(labels...)
			p.X.Min = 0
			if !withQueue {
				// The labels are already on the left panel.
				p.Y.Tick.Label.Color = color.Transparent
			}
			panels = append(panels, p)
		}
	}
	cols := min(2, len(panels))
	var grid [][]*plot.Plot
	for i := 0; i < len(panels); i += cols {
		row := panels[i:min(i+cols, len(panels))]
		for len(row) < cols {
			row = append(row, nil)
		}
		grid = append(grid, row)
	}
	h := stagesHeight + vg.Length(len(ss))*0.12*vg.Inch
	return true, save(path, grid, panelWidth, h, "stage", entries)
}

// hasUnit reports whether any configuration in ss has unit.
func hasUnit(ss []series, unit string) bool {
	for _, s := range ss {
		for _, g := range s.groups {
			if _, ok := g.values[unit]; ok {
				return true
			}
		}
	}
	return false
}

// save draws a grid of panels (nil panels are left blank) with the legend
// entries in a column to their right, and writes a PNG.
func save(path string, grid [][]*plot.Plot, w, h vg.Length, legendTitle string, entries []legendEntry) error {
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = vg.Points(28)
	legend.Padding = vg.Points(4)
	legendWidth := vg.Length(0)
	for _, e := range entries {
		legend.Add(e.label, e.thumbs...)
		legendWidth = max(legendWidth, legend.TextStyle.Width(e.label))
	}
	legendWidth += legend.ThumbnailWidth + vg.Points(24)
	rows, cols := len(grid), len(grid[0])
	width, height := w*vg.Length(cols)+legendWidth, h*vg.Length(rows)
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	plots := draw.Crop(dc, 0, -legendWidth, 0, 0)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(8), PadY: vg.Points(8), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	for r, row := range grid {
		for c, p := range row {
			if p != nil {
				p.Draw(tiles.At(plots, c, r))
			}
		}
	}
	legend.Draw(draw.Crop(dc, width-legendWidth+vg.Points(6), 0, 0, -vg.Points(30)))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// logTicks marks 1, 2 and 5 times powers of ten on a log axis, labelled with
// k and M suffixes, plus unlabelled minor ticks; with less than two labelled
// ticks in range it labels every minor tick too.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	labelled := 0
	for d := math.Floor(math.Log10(lo)); d <= math.Ceil(math.Log10(hi)); d++ {
		for m := 1.0; m <= 9; m++ {
			v := m * math.Pow(10, d)
			if v < lo*0.999 || v > hi*1.001 {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = shortNum(v)
				labelled++
			}
			ticks = append(ticks, t)
		}
	}
	if labelled < 2 {
		for i := range ticks {
			ticks[i].Label = shortNum(ticks[i].Value)
		}
	}
	return ticks
}

// shortNum prints 20000 as 20k and 0.5 as 0.5.
func shortNum(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

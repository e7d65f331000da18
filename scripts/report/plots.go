package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Figure sizes.
const (
	dpi         = 110
	panelWidth  = 5 * vg.Inch
	panelHeight = 3.5 * vg.Inch
	titleHeight = 0.5 * vg.Inch
)

// ciRuns is the fewest runs with which benchmath gives a 95 % confidence
// interval of the median.
const ciRuns = 6

// writePlots draws the plots of the series (of the -plot benchmark) and the
// headline into dir and returns the file names it wrote (relative to dir).
// It writes nothing when there are no series.
func writePlots(dir string, ss []series, hl *headline) ([]string, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	var written []string
	for _, f := range []struct {
		name string
		draw func(string) (bool, error)
	}{
		{"headline.png", func(path string) (bool, error) { return drawHeadline(path, hl) }},
		{"throughput.png", func(path string) (bool, error) { return drawThroughput(path, ss) }},
		{"latency.png", func(path string) (bool, error) { return drawLatency(path, ss) }},
		{"stages.png", func(path string) (bool, error) { return drawStages(path, ss) }},
	} {
		ok, err := f.draw(filepath.Join(dir, f.name))
		if err != nil {
			return nil, fmt.Errorf("report: %s: %w", f.name, err)
		}
		if ok {
			written = append(written, f.name)
		}
	}
	return written, nil
}

// quantity is one unit drawn against batch size, with its panel title.
type quantity struct {
	unit, name string
}

// drawThroughput draws samples/s against batch size.
func drawThroughput(path string, ss []series) (bool, error) {
	return drawLines(path, "Throughput", ss, []quantity{{"samples/s", "throughput"}}, "throughput (samples/s)")
}

// drawLatency draws p50 (left) and p99 (right) latency against batch size on
// a shared y axis.
func drawLatency(path string, ss []series) (bool, error) {
	return drawLines(path, "Latency", ss, []quantity{{"p50-latency-sec", "p50"}, {"p99-latency-sec", "p99"}}, "latency")
}

// drawLines draws each quantity against batch size, one line per series, as
// arrange lays them out: a panel per quantity and group of series, every
// panel on one y axis. ylabel names the quantity; a time gets its unit.
func drawLines(path, what string, ss []series, qs []quantity, ylabel string) (bool, error) {
	var units []string
	for _, q := range qs {
		if hasUnit(ss, q.unit) {
			units = append(units, q.unit)
		}
	}
	if len(units) == 0 {
		return false, nil
	}
	lo, hi := valueRange(ss, units)
	factor, unitName := axisUnit(units[0], hi)
	if unitName != "" {
		ylabel += " (" + unitName + ")"
	}
	axis := newYAxis(lo/factor, hi/factor)
	if axis.log {
		ylabel += ", log scale"
	}
	l := arrange(ss)
	var cells []*plot.Plot
	for _, pn := range l.panels {
		for _, q := range qs {
			p := newPlot(panelTitle(pn.title, q.name, len(qs) > 1), ylabel, ss)
			if err := linePlot(p, pn.series, q.unit, factor, l.styles); err != nil {
				return false, err
			}
			axis.apply(p)
			cells = append(cells, p)
		}
	}
	runs, fewest := runsText(ss, units[0])
	title := fmt.Sprintf("%s vs batch size: median of %s", what, runs)
	switch {
	case fewest >= ciRuns:
		title += ", bars: 95 % confidence interval of the median"
	case hasCI(ss, units[0]):
		title += fmt.Sprintf(", bars: 95 %% CI of the median where there are %d runs", ciRuns)
	default:
		title += fmt.Sprintf(" (too few for a confidence interval, which needs %d)", ciRuns)
	}
	cols := len(qs) * panelColumns(l)
	return true, saveFigure(path, title, grid(cells, cols), panelWidth, panelHeight, l.legend)
}

// panelTitle is a panel's title: its series' shared keys and the quantity.
func panelTitle(keys, quantity string, several bool) string {
	switch {
	case keys == "" && several:
		return quantity
	case keys == "":
		return ""
	case several:
		return keys + ": " + quantity
	}
	return keys
}

// panelColumns is how many panels a row of the figure holds: one per
// graphs setting when the panels are precision x graphs, else up to three.
func panelColumns(l layout) int {
	n := len(l.panels)
	if n <= 1 {
		return 1
	}
	graphs := map[string]bool{}
	for _, p := range l.panels {
		graphs[p.series[0].values["graphs"]] = true
	}
	if len(graphs) > 1 && len(graphs) < n {
		return len(graphs)
	}
	return min(3, n)
}

// valueRange returns the smallest and largest positive medians and CI
// bounds of units over the series.
func valueRange(ss []series, units []string) (lo, hi float64) {
	lo = math.Inf(1)
	for _, s := range ss {
		for _, g := range s.groups {
			for _, u := range units {
				st, ok := g.stat(u)
				if !ok || st.median <= 0 {
					continue
				}
				lo, hi = math.Min(lo, st.median), math.Max(hi, st.median)
				if st.ciOK {
					lo, hi = math.Min(lo, st.lo), math.Max(hi, st.hi)
				}
			}
		}
	}
	return lo, hi
}

// hasCI reports whether any configuration has enough runs of unit for a
// confidence interval.
func hasCI(ss []series, unit string) bool {
	for _, s := range ss {
		for _, g := range s.groups {
			if st, ok := g.stat(unit); ok && st.ciOK {
				return true
			}
		}
	}
	return false
}

// linePlot adds one line per series of the median of unit against batch
// size, with the 95 % confidence interval as error bars where there are
// enough runs. Configurations that did not measure unit are left out.
func linePlot(p *plot.Plot, ss []series, unit string, factor float64, styles map[string]style) error {
	for _, s := range ss {
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
		st := styles[s.label]
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color, line.Width, line.Dashes = st.color, vg.Points(1.5), st.dashes
		points.GlyphStyle = st.glyph
		bars, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{xys, errs})
		if err != nil {
			return err
		}
		bars.Color = st.color
		p.Add(line, points, bars)
	}
	return nil
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

// newPlot returns a plot with our axes: log-scaled batch sizes on x, ticked
// at the batch sizes measured.
func newPlot(title, ylabel string, ss []series) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "batch size (log scale)"
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

// hasUnit reports whether any configuration in ss measured unit.
func hasUnit(ss []series, unit string) bool {
	for _, s := range ss {
		for _, g := range s.groups {
			if len(measured(g, unit)) > 0 {
				return true
			}
		}
	}
	return false
}

// grid arranges cells in rows of cols, the last row padded with nil.
func grid(cells []*plot.Plot, cols int) [][]*plot.Plot {
	var out [][]*plot.Plot
	for i := 0; i < len(cells); i += cols {
		row := slices.Clone(cells[i:min(i+cols, len(cells))])
		for len(row) < cols {
			row = append(row, nil)
		}
		out = append(out, row)
	}
	return out
}

// legendEntry is one line of a legend drawn beside the plots.
type legendEntry struct {
	label  string
	thumbs []plot.Thumbnailer
}

// entries turns a layout's legend into legend entries: a line in each
// style, with its glyph.
func entries(styles []styleEntry) []legendEntry {
	var out []legendEntry
	for _, e := range styles {
		line := &plotter.Line{LineStyle: draw.LineStyle{Color: e.style.color, Width: vg.Points(1.5), Dashes: e.style.dashes}}
		dot := &plotter.Scatter{GlyphStyle: e.style.glyph}
		out = append(out, legendEntry{e.label, []plot.Thumbnailer{line, dot}})
	}
	return out
}

// saveFigure draws a figure, its title on top, a grid of panels (nil panels
// are left blank) and the legend in a column to their right, and writes a
// PNG.
func saveFigure(path, title string, grid [][]*plot.Plot, w, h vg.Length, styles []styleEntry) error {
	return saveWithLegend(path, title, grid, w, h, entries(styles))
}

// saveWithLegend is saveFigure with the legend entries given.
func saveWithLegend(path, title string, grid [][]*plot.Plot, w, h vg.Length, legendEntries []legendEntry) error {
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = vg.Points(28)
	legend.Padding = vg.Points(4)
	legendWidth := vg.Length(0)
	for _, e := range legendEntries {
		legend.Add(e.label, e.thumbs...)
		legendWidth = max(legendWidth, legend.TextStyle.Width(e.label))
	}
	if len(legendEntries) > 0 {
		legendWidth += legend.ThumbnailWidth + vg.Points(24)
	}
	rows, cols := len(grid), len(grid[0])
	titleStyle := plot.New().Title.TextStyle
	titleStyle.Font.Size = vg.Points(13)
	width := max(w*vg.Length(cols)+legendWidth, titleStyle.Width(title)+vg.Points(24))
	height := h*vg.Length(rows) + titleHeight
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	titleStyle.XAlign, titleStyle.YAlign = draw.XCenter, draw.YCenter
	dc.FillText(titleStyle, vg.Point{X: width / 2, Y: height - titleHeight/2}, title)
	plots := draw.Crop(dc, 0, -(width - w*vg.Length(cols)), 0, -titleHeight)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(10), PadY: vg.Points(10), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	for r, row := range grid {
		for c, p := range row {
			if p != nil {
				p.Draw(tiles.At(plots, c, r))
			}
		}
	}
	if len(legendEntries) > 0 {
		legend.Draw(draw.Crop(dc, width-legendWidth+vg.Points(6), 0, 0, -titleHeight-vg.Points(24)))
	}
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

// smallText is the style of annotations on the plots.
func smallText(c color.Color) draw.TextStyle {
	st := plot.New().Legend.TextStyle
	st.Font.Size = font.Length(vg.Points(8))
	st.Color = c
	return st
}

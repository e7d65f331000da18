package main

import (
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// stages are the per-stage mean times of a request, stacked left to right.
var stages = []struct {
	unit, label string
	color       color.Color
}{
	{"queue-sec", "queue", color.RGBA{0xb0, 0xb0, 0xb0, 0xff}},
	{"h2d-sec", "copy in (H2D)", color.RGBA{0x00, 0x72, 0xb2, 0xff}},
	{"compute-sec", "compute", color.RGBA{0xe6, 0x9f, 0x00, 0xff}},
	{"d2h-sec", "copy out (D2H)", color.RGBA{0x00, 0x9e, 0x73, 0xff}},
}

// stageRow is the height of one series' bar in the stage panels.
const stageRow = 0.16 * vg.Inch

// drawStages draws, per batch size, one horizontal stacked bar per series:
// the mean time a request spends queued, copying in, computing and copying
// out. With up to maxLegend series each batch size gets two panels, with
// and without the queue (whose wait under a burst dwarfs the work); with
// more, only the service time (no queue), three batch sizes to a row.
// Series that measured no stage at a batch size are labelled n/a.
func drawStages(path string, ss []series) (bool, error) {
	measuredAny := false
	for _, st := range stages {
		measuredAny = measuredAny || hasUnit(ss, st.unit)
	}
	if !measuredAny {
		return false, nil
	}
	few := len(ss) <= maxLegend
	var cells []*plot.Plot
	var legend []legendEntry
	for _, batch := range batchSizes(ss) {
		// Mean of each stage per series, bottom to top in reverse
		// series order, so that the series read top to bottom.
		vals := make([][]float64, len(stages))
		labels := make([]string, len(ss))
		for k := range vals {
			vals[k] = make([]float64, len(ss))
		}
		for si, s := range ss {
			row := len(ss) - 1 - si
			labels[row] = s.label + " (n/a)"
			for _, g := range s.groups {
				if g.batch != batch {
					continue
				}
				for k, st := range stages {
					if v, ok := g.stat(st.unit); ok {
						vals[k][row] = v.mean
						labels[row] = s.label
					}
				}
			}
		}
		for _, withQueue := range []bool{true, false} {
			if withQueue && !few {
				continue
			}
			first, title := 0, fmt.Sprintf("batch %d: time per request", batch)
			if !withQueue {
				first, title = 1, fmt.Sprintf("batch %d: service time (no queue)", batch)
			}
			biggest := 0.0
			for i := range ss {
				t := 0.0
				for k := first; k < len(stages); k++ {
					t += vals[k][i]
				}
				biggest = max(biggest, t)
			}
			factor, unitName := axisUnit("queue-sec", biggest)
			p := plot.New()
			p.Title.Text = title
			p.X.Label.Text = "mean time (" + unitName + ")"
			p.Add(plotter.NewGrid())
			var below *plotter.BarChart
			for k := first; k < len(stages); k++ {
				st := stages[k]
				scaled := make(plotter.Values, len(vals[k]))
				for i, v := range vals[k] {
					scaled[i] = v / factor
				}
				bar, err := plotter.NewBarChart(scaled, stageRow*0.7)
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
				if !slices.ContainsFunc(legend, func(e legendEntry) bool { return e.label == st.label }) {
					legend = append(legend, legendEntry{st.label, []plot.Thumbnailer{bar}})
				}
			}
			p.NominalY(labels...)
			p.X.Min = 0
			linearAxisX(p, biggest/factor)
			if few && !withQueue {
				// The labels are already on the left panel.
				p.Y.Tick.Label.Color = color.Transparent
			}
			cells = append(cells, p)
		}
	}
	cols := 2
	if !few {
		cols = min(3, len(cells))
	}
	runs, _ := runsText(ss, "compute-sec")
	title := "Where a request's time goes: mean per stage over " + runs
	h := vg.Length(len(ss))*stageRow + 1.3*vg.Inch
	return true, saveWithLegend(path, title, grid(cells, cols), panelWidth+1.5*vg.Inch, h, legend)
}

// linearAxisX gives p's x axis a linear range from 0 with readable ticks.
func linearAxisX(p *plot.Plot, hi float64) {
	p.X.Min, p.X.Max = 0, max(hi*1.05, 1e-9)
	p.X.Tick.Marker = linearTicks{}
}

package main

import (
	"fmt"
	"image/color"
	"slices"
	"strings"

	"golang.org/x/perf/benchproc"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// seriesKeyNames are the sub-benchmark keys that tell plot lines apart, in
// the order labels name them; batch is the x axis.
var seriesKeyNames = []string{"precision", "graphs", "backend", "workers", "pipeline", "devices", "input", "batching", "load", "clients"}

// panelKeyNames are the keys that split the series into small multiples
// when there are more than a legend holds.
var panelKeyNames = []string{"precision", "graphs"}

// maxLegend is the most series one panel's legend lists; beyond it the
// series are drawn as small multiples.
const maxLegend = 8

// series is one line of a plot: the configurations that differ only in
// batch size, sorted by batch size.
type series struct {
	values map[string]string // the series keys' values
	label  string            // the keys that vary between series, readable
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
	out := make([]series, 0, len(keys))
	for _, k := range keys {
		gs := byKey[k]
		slices.SortFunc(gs, func(a, b *group) int { return a.batch - b.batch })
		vals := map[string]string{}
		for _, name := range seriesKeyNames {
			if v := gs[0].get(name); v != "" {
				vals[name] = v
			}
		}
		out = append(out, series{values: vals, groups: gs})
	}
	varying := varyingKeys(out, seriesKeyNames)
	for i := range out {
		out[i].label = describe(out[i].values, varying)
		if out[i].label == "" {
			out[i].label = base
		}
	}
	return out
}

// varyingKeys returns the keys among names whose value differs between
// series.
func varyingKeys(ss []series, names []string) []string {
	var out []string
	for _, k := range names {
		for _, s := range ss[min(1, len(ss)):] {
			if s.values[k] != ss[0].values[k] {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// describe names the values of keys readably: "fp16, graphs on, 4
// workers, overlap".
func describe(values map[string]string, keys []string) string {
	var parts []string
	for _, k := range keys {
		v, ok := values[k]
		if !ok {
			continue
		}
		switch k {
		case "precision", "pipeline", "backend", "load":
			parts = append(parts, v)
		case "graphs":
			parts = append(parts, "graphs "+v)
		case "workers":
			parts = append(parts, plural(v, "worker"))
		case "devices":
			parts = append(parts, plural(v, "GPU"))
		case "input":
			parts = append(parts, v+" input")
		case "batching":
			parts = append(parts, "batching "+v)
		case "clients":
			parts = append(parts, plural(v, "client"))
		default:
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ", ")
}

// plural returns "1 worker" or "4 workers".
func plural(n, noun string) string {
	if n == "1" {
		return n + " " + noun
	}
	return n + " " + noun + "s"
}

// panel is one of the small multiples: the series that share its keys.
type panel struct {
	title  string
	series []series
}

// style is how a series is drawn: its colour, dash pattern and glyph.
type style struct {
	color  color.Color
	dashes []vg.Length
	glyph  draw.GlyphStyle
}

// layout is how a figure shows its series: in panels, each series with a
// style, and a legend that names each style.
type layout struct {
	panels []panel
	styles map[string]style // by series label
	legend []styleEntry
}

// styleEntry is one legend line: a style and what it stands for.
type styleEntry struct {
	label string
	style style
}

// arrange lays the series out. Up to maxLegend series share one panel and
// the legend names each. More are drawn as small multiples, one panel per
// value of the panel keys (precision x graphs) that vary; within every
// panel the colour tells the other keys (workers, back-end...) apart and
// the dash pattern the pipeline, so one legend of those combinations, and
// the panel titles, label every series.
func arrange(ss []series) layout {
	varying := varyingKeys(ss, seriesKeyNames)
	var panelKeys []string
	if len(ss) > maxLegend {
		for _, k := range panelKeyNames {
			if slices.Contains(varying, k) {
				panelKeys = append(panelKeys, k)
			}
		}
	}
	inPanel := slices.DeleteFunc(slices.Clone(varying), func(k string) bool { return slices.Contains(panelKeys, k) })
	colourKeys := slices.DeleteFunc(slices.Clone(inPanel), func(k string) bool { return k == "pipeline" })

	l := layout{styles: map[string]style{}}
	var colours, dashes, entries []string
	for _, s := range ss {
		title := describe(s.values, panelKeys)
		i := slices.IndexFunc(l.panels, func(p panel) bool { return p.title == title })
		if i < 0 {
			l.panels = append(l.panels, panel{title: title})
			i = len(l.panels) - 1
		}
		l.panels[i].series = append(l.panels[i].series, s)

		c, d := describe(s.values, colourKeys), s.values["pipeline"]
		if !slices.Contains(colours, c) {
			colours = append(colours, c)
		}
		if !slices.Contains(dashes, d) {
			dashes = append(dashes, d)
		}
		st := makeStyle(slices.Index(colours, c), slices.Index(dashes, d))
		l.styles[s.label] = st
		entry := describe(s.values, inPanel)
		if entry == "" {
			entry = s.label
		}
		if !slices.Contains(entries, entry) {
			entries = append(entries, entry)
			l.legend = append(l.legend, styleEntry{entry, st})
		}
	}
	return l
}

// palette is the colours of the series: Okabe and Ito's colour-blind safe
// set, its yellow darkened to show on white.
var palette = []color.Color{
	color.RGBA{0x00, 0x72, 0xb2, 0xff}, color.RGBA{0xe6, 0x9f, 0x00, 0xff},
	color.RGBA{0x00, 0x9e, 0x73, 0xff}, color.RGBA{0xd5, 0x5e, 0x00, 0xff},
	color.RGBA{0xcc, 0x79, 0xa7, 0xff}, color.RGBA{0x56, 0xb4, 0xe9, 0xff},
	color.RGBA{0x00, 0x00, 0x00, 0xff}, color.RGBA{0x99, 0x88, 0x00, 0xff},
}

// makeStyle returns the style of colour i and dash pattern d.
func makeStyle(i, d int) style {
	dashes := [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}}
	shapes := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.RingGlyph{}, draw.PlusGlyph{}}
	c := palette[i%len(palette)]
	return style{
		color:  c,
		dashes: dashes[d%len(dashes)],
		glyph:  draw.GlyphStyle{Color: c, Radius: vg.Points(2.5), Shape: shapes[(i/len(palette)+d)%len(shapes)]},
	}
}

// runsText says how many runs the medians of a figure are of: "5 runs" or
// "3-6 runs".
func runsText(ss []series, unit string) (text string, minRuns int) {
	lo, hi := 0, 0
	for _, s := range ss {
		for _, g := range s.groups {
			n := len(measured(g, unit))
			if n == 0 {
				continue
			}
			if lo == 0 || n < lo {
				lo = n
			}
			hi = max(hi, n)
		}
	}
	if lo == hi {
		return fmt.Sprintf("%d runs", lo), lo
	}
	return fmt.Sprintf("%d-%d runs", lo, hi), lo
}

package main

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"slices"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Geometry of the picture, in pixels.
const (
	margin   = 10
	rowH     = 16 // box height
	rowPitch = 20 // distance between row tops
	headerH  = 44 // title and legend
	axisH    = 34 // axis line, ticks and labels
	charW    = 7  // basicfont.Face7x13 advance
)

// stageColors are the colours of the event names inference/trace writes.
var stageColors = []struct {
	name string
	c    color.RGBA
}{
	{"queue", color.RGBA{0xb0, 0xb0, 0xb0, 0xff}},
	{"h2d", color.RGBA{0x3b, 0x7d, 0xd8, 0xff}},
	{"compute", color.RGBA{0x2e, 0xa0, 0x4a, 0xff}},
	{"d2h", color.RGBA{0xf0, 0x8c, 0x1e, 0xff}},
	{"deliver", color.RGBA{0x8e, 0x5c, 0xc2, 0xff}},
}

// colorOf returns the colour of an event name: a fixed one for the stages,
// otherwise one derived from a hash of the name.
func colorOf(name string) color.RGBA {
	for _, s := range stageColors {
		if s.name == name {
			return s.c
		}
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	return color.RGBA{uint8(0x40 + v%0x90), uint8(0x40 + (v>>8)%0x90), uint8(0x40 + (v>>16)%0x90), 0xff}
}

// row is one thread's line of boxes.
type row struct {
	th    *thread
	boxes []event
}

// chart is a laid-out timeline: rows in display order and the time window.
type chart struct {
	o        options
	rows     []row
	names    []string // event names present, in legend order
	from, to float64  // µs
}

// newChart keeps the events of tr in o's window and on o's threads, and
// orders the rows as Perfetto does.
func newChart(tr *traceFile, o options) *chart {
	c := &chart{o: o, from: o.from, to: o.to}
	byThread := map[threadID][]event{}
	end := math.Inf(-1)
	for _, e := range tr.events {
		if e.ts+e.dur < o.from || e.ts > o.to {
			continue
		}
		th := tr.threads[e.thread]
		if o.threads != nil && !o.threads.MatchString(th.label()) {
			continue
		}
		byThread[e.thread] = append(byThread[e.thread], e)
		end = max(end, e.ts+e.dur)
	}
	if math.IsInf(c.to, 1) {
		c.to = end
	}
	if !(c.to > c.from) {
		c.to = c.from + 1
	}
	seen := map[string]bool{}
	for id, evs := range byThread {
		slices.SortFunc(evs, func(a, b event) int {
			return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.fromFile, b.fromFile))
		})
		c.rows = append(c.rows, row{th: tr.threads[id], boxes: evs})
		for _, e := range evs {
			seen[e.name] = true
		}
	}
	slices.SortFunc(c.rows, func(a, b row) int { return compareThreads(a.th, b.th) })
	for _, s := range stageColors {
		if seen[s.name] {
			c.names = append(c.names, s.name)
			delete(seen, s.name)
		}
	}
	var other []string
	for n := range seen {
		other = append(other, n)
	}
	slices.Sort(other)
	c.names = append(c.names, other...)
	return c
}

// compareThreads orders threads by process sort index, pid, thread sort
// index and tid; a missing sort index sorts after the present ones.
func compareThreads(a, b *thread) int {
	sortKey := func(v float64, ok bool) float64 {
		if !ok {
			return math.Inf(1)
		}
		return v
	}
	return cmp.Or(
		cmp.Compare(sortKey(a.procSort, a.hasProcS), sortKey(b.procSort, b.hasProcS)),
		compareIDs(a.id.pid, b.id.pid),
		cmp.Compare(sortKey(a.sort, a.hasSortI), sortKey(b.sort, b.hasSortI)),
		compareIDs(a.id.tid, b.id.tid),
	)
}

// compareIDs compares numeric ids as numbers and others as text.
func compareIDs(a, b string) int {
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	if errA == nil && errB == nil {
		return cmp.Compare(x, y)
	}
	return cmp.Compare(a, b)
}

func (c *chart) boxes() int {
	n := 0
	for _, r := range c.rows {
		n += len(r.boxes)
	}
	return n
}

// labelWidth is the width of the row label column.
func (c *chart) labelWidth() int {
	w := 0
	for _, r := range c.rows {
		w = max(w, len(r.th.label()))
	}
	return w*charW + 2*margin
}

// x maps a time in µs to a pixel column of the plot area [left, right).
func (c *chart) x(us float64, left, right int) float64 {
	return float64(left) + (us-c.from)/(c.to-c.from)*float64(right-left)
}

// draw renders the chart.
func (c *chart) draw() *image.RGBA {
	left := c.labelWidth()
	right := c.o.width - margin
	height := headerH + len(c.rows)*rowPitch + axisH + margin
	img := image.NewRGBA(image.Rect(0, 0, c.o.width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)

	text(img, margin, 16, c.o.title, color.Black)
	lx := margin
	for _, n := range c.names {
		fill(img, image.Rect(lx, 26, lx+12, 38), colorOf(n))
		text(img, lx+16, 36, n, color.Black)
		lx += 16 + len(n)*charW + 14
	}

	for i, r := range c.rows {
		top := headerH + i*rowPitch
		if i%2 == 0 {
			fill(img, image.Rect(left, top-2, right, top+rowH+2), color.RGBA{0xf3, 0xf3, 0xf3, 0xff})
		}
		if i > 0 && r.th.id.pid != c.rows[i-1].th.id.pid {
			fill(img, image.Rect(margin, top-3, right, top-2), color.RGBA{0x60, 0x60, 0x60, 0xff})
		}
		text(img, margin, top+12, r.th.label(), color.Black)
		for _, e := range r.boxes {
			x0 := c.x(e.ts, left, right)
			x1 := c.x(e.ts+e.dur, left, right)
			box(img, x0, x1, top, left, right, colorOf(e.name))
		}
	}

	// Time axis.
	axisY := headerH + len(c.rows)*rowPitch + 4
	fill(img, image.Rect(left, axisY, right, axisY+1), color.Black)
	step := tickStep(c.to-c.from, (right-left)/110)
	for t := math.Ceil(c.from/step) * step; t <= c.to+step*1e-9; t += step {
		px := int(math.Round(c.x(t, left, right)))
		fill(img, image.Rect(px, axisY, px+1, axisY+5), color.Black)
		fill(img, image.Rect(px, headerH-2, px+1, axisY), color.RGBA{0, 0, 0, 0x18})
		l := formatTime(t, step)
		text(img, px-len(l)*charW/2, axisY+18, l, color.Black)
	}
	return img
}

// box draws an event box from x0 to x1 (fractional pixels), at least two
// pixels wide so that short events stay visible, clipped to the plot area, with a darker outline when it is wide
// enough for one to show.
func box(img *image.RGBA, x0, x1 float64, top, left, right int, c color.RGBA) {
	a := max(int(math.Floor(x0)), left)
	b := min(int(math.Ceil(x1)), right)
	if b < a+2 {
		b = a + 2
	}
	r := image.Rect(a, top, b, top+rowH)
	dark := color.RGBA{c.R / 2, c.G / 2, c.B / 2, 0xff}
	if r.Dx() >= 4 {
		fill(img, r, dark)
		r = r.Inset(1)
	}
	fill(img, r, c)
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Over)
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// tickStep returns a 1-2-5 step in µs that puts about n ticks on span µs.
func tickStep(span float64, n int) float64 {
	raw := span / float64(max(n, 1))
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// formatTime formats t µs in the unit that suits the tick step.
func formatTime(t, step float64) string {
	unit, div := "us", 1.0
	switch {
	case step >= 1e6:
		unit, div = "s", 1e6
	case step >= 1e3:
		unit, div = "ms", 1e3
	}
	v := t / div
	prec := max(0, -int(math.Floor(math.Log10(step/div)+1e-9)))
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + unit
}

func writePNG(path string, img image.Image) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("traceplot: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("traceplot: %w", cerr)
		}
	}()
	if err := png.Encode(f, img); err != nil {
		return fmt.Errorf("traceplot: encoding %s: %w", path, err)
	}
	return nil
}

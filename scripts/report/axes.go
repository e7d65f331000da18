package main

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// logSpan is the ratio of the largest to the smallest value beyond which a
// y axis is logarithmic: below it a linear axis from zero shows differences
// in proportion.
const logSpan = 20

// yAxis is a value axis shared by the panels of a figure.
type yAxis struct {
	min, max float64
	log      bool
}

// newYAxis returns the axis for values between lo and hi (both > 0): a log
// axis padded by 15 % of a decade when they span more than logSpan, else a
// linear one from 0 to 5 % above hi, so that no axis starts just below the
// data and turns a 1 % difference into a cliff.
func newYAxis(lo, hi float64) yAxis {
	if lo > 0 && hi/lo > logSpan {
		return yAxis{min: lo / 1.4, max: hi * 1.4, log: true}
	}
	return yAxis{min: 0, max: hi * 1.05}
}

// apply sets p's y axis and its ticks.
func (a yAxis) apply(p *plot.Plot) {
	p.Y.Min, p.Y.Max = a.min, a.max
	if a.log {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		return
	}
	p.Y.Scale = plot.LinearScale{}
	p.Y.Tick.Marker = linearTicks{}
}

// linearTicks marks a linear axis at multiples of 1, 2 or 5 times a power
// of ten, about five labelled ticks. All labels share one suffix (k for
// thousands, M for millions, by the axis's end from 10,000 on) and as many
// decimals as the step needs in it: 0, 20k, 40k; 0, 500, 1000; 0, 0.5, 1.0.
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: shortNum(lo)}}
	}
	// The step of 1, 2, 5 or 10 times a power of ten nearest (by ratio)
	// to a fifth of the range.
	raw := (hi - lo) / 5
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := pow
	for _, m := range []float64{2, 5, 10} {
		if math.Abs(math.Log(m*pow/raw)) < math.Abs(math.Log(step/raw)) {
			step = m * pow
		}
	}
	suffix, div := "", 1.0
	if end := max(math.Abs(lo), math.Abs(hi)); end >= 1e4 {
		suffix, div = scaleSuffix(end)
	}
	decimals := max(0, -int(math.Floor(math.Log10(step/div)+1e-9)))
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi+step*1e-9; i++ {
		v := i * step
		label := "0"
		if i != 0 {
			label = strconv.FormatFloat(v/div, 'f', decimals, 64) + suffix
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}

// scaleSuffix returns the suffix and divisor for numbers up to a: k for
// thousands, M for millions.
func scaleSuffix(a float64) (string, float64) {
	switch {
	case a >= 1e6:
		return "M", 1e6
	case a >= 1e3:
		return "k", 1e3
	}
	return "", 1
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

// shortNum prints v in at most four significant digits, with k or M for
// thousands and millions: 20000 as 20k, 0.5 as 0.5.
func shortNum(v float64) string {
	suffix, div := scaleSuffix(math.Abs(v))
	return strconv.FormatFloat(v/div, 'g', 4, 64) + suffix
}

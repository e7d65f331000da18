package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"golang.org/x/perf/benchunit"
)

// writeTable prints the verdicts grouped by benchmark: a line with the
// benchmark's name, then one row per unit with the base and head centres and
// their 95 % confidence intervals, the change, the test's p-value and sample
// sizes, the p-value adjusted by Holm-Bonferroni, the threshold and the
// verdict.
func writeTable(w io.Writer, vs []verdict, cfg *config) error {
	type line struct {
		name  string   // benchmark name heading, or ""
		cells []string // a row of the table
	}
	lines := []line{{cells: []string{"unit", "better", "base", "head", "change", "test", "Holm p", "threshold", "verdict"}}}
	last := ""
	for _, v := range vs {
		if cfg.changes && v.status == unchanged {
			continue
		}
		if v.key.name != last {
			lines = append(lines, line{name: v.key.name})
			last = v.key.name
		}
		dir := "lower"
		if v.better > 0 {
			dir = "higher"
		}
		switch v.status {
		case onlyBase, onlyHead:
			lines = append(lines, line{cells: []string{v.key.unit, dir, "", "", "", "", "", "", v.status.String()}})
			continue
		}
		sc := benchunit.CommonScale([]float64{v.base, v.head}, benchunit.ClassOf(v.key.unit))
		holmP, threshold := "", ""
		if v.gated() {
			holmP = fmt.Sprintf("%.3f", v.holmP)
		}
		if !v.secondary {
			threshold = formatPct(v.threshold)
		}
		lines = append(lines, line{cells: []string{
			v.key.unit, dir,
			sc.Format(v.base) + " ± " + pct(v.baseCI, false),
			sc.Format(v.head) + " ± " + pct(v.headCI, false),
			pct(v.delta, true), v.cmp.String(), holmP, threshold, v.status.String(),
		}})
	}
	// Align the rows across all benchmarks; the name headings stand alone.
	var width []int
	for _, l := range lines {
		for i, c := range l.cells {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, l := range lines {
		if l.cells == nil {
			b.WriteString(l.name + "\n")
			continue
		}
		b.WriteString(" ")
		for i, c := range l.cells {
			b.WriteString(" " + c)
			if i < len(l.cells)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)+1))
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// pct formats a relative value as a percentage.
func pct(v float64, signed bool) string {
	switch {
	case math.IsInf(v, 0):
		return "∞"
	case signed:
		return fmt.Sprintf("%+.2f%%", v*100)
	default:
		return fmt.Sprintf("%.0f%%", v*100)
	}
}

// summarize prints the overall verdict and returns an error wrapping
// ErrRegression if any benchmark regressed.
func summarize(w io.Writer, vs []verdict) error {
	counts := map[status]int{}
	for _, v := range vs {
		counts[v.status]++
	}
	compared := len(vs) - counts[onlyBase] - counts[onlyHead]
	fmt.Fprintf(w, "\n%d comparisons, %d gated (p-values adjusted by Holm-Bonferroni): %d regressed, %d worse within threshold, %d worse under noise floor, %d improved, %d unchanged, %d not gated, %d secondary; %d only in base, %d only in head\n",
		compared, compared-counts[ungated]-counts[secondary], counts[regressed], counts[tolerated], counts[underFloor], counts[improved], counts[unchanged], counts[ungated], counts[secondary], counts[onlyBase], counts[onlyHead])
	if n := counts[regressed]; n > 0 {
		fmt.Fprintf(w, "gate: FAIL\n")
		return fmt.Errorf("%w: %d of %d comparisons are significantly worse than their threshold (rows marked REGRESSION)", ErrRegression, n, compared)
	}
	fmt.Fprintf(w, "gate: PASS\n")
	return nil
}

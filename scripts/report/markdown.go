package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// summaryUnits are the units shown in a benchmark's summary table, in
// order, when present; the rest appear in the per-configuration tables.
var summaryUnits = []string{"samples/s", "req/s", "sec/op", "mean-latency-sec", "p50-latency-sec", "p99-latency-sec", "warmup-sec", "gpu-util-pct", "cpu-util-pct"}

// writeMarkdown writes the whole report.
func writeMarkdown(w io.Writer, ds *dataset, title string, images []string, hl *headline) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", title)
	for _, c := range ds.config {
		fmt.Fprintf(&b, "- %s: %s\n", c.key, c.value)
	}
	if len(ds.config) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("Cells are mean ± standard deviation over runs; the detailed tables add the median and its 95 % confidence interval. " +
		"n/a: not measured (a GPU utilisation of 0 in files without gpu-util-samples means NVML took no sample during the run).\n\n")
	writeHeadline(&b, hl)
	for _, img := range images {
		fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(img, ".png"), img)
	}
	var bases []string
	for _, g := range ds.groups {
		if !slices.Contains(bases, g.base) {
			bases = append(bases, g.base)
		}
	}
	for _, base := range bases {
		var gs []*group
		for _, g := range ds.groups {
			if g.base == base {
				gs = append(gs, g)
			}
		}
		writeBenchmark(&b, base, gs)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeBenchmark writes the summary table and the per-configuration tables of
// one benchmark.
func writeBenchmark(b *strings.Builder, base string, gs []*group) {
	fmt.Fprintf(b, "## Benchmark%s\n\n", base)
	varying, fixed := splitKeys(gs)
	if len(fixed) > 0 {
		parts := make([]string, len(fixed))
		for i, p := range fixed {
			parts[i] = "`" + keyString(p) + "`"
		}
		fmt.Fprintf(b, "Every row: %s.\n\n", strings.Join(parts, ", "))
	}

	// Summary: one row per configuration.
	var units []string
	for _, u := range summaryUnits {
		if u == "req/s" && slices.Contains(units, "samples/s") || u == "sec/op" && len(units) > 0 {
			continue
		}
		for _, g := range gs {
			if _, ok := g.values[u]; ok {
				units = append(units, u)
				break
			}
		}
	}
	header := append(slices.Clone(varying), "runs")
	for _, u := range units {
		header = append(header, title(u))
	}
	writeRow(b, header)
	writeRow(b, slices.Repeat([]string{"---"}, len(header)))
	for _, g := range gs {
		row := make([]string, 0, len(header))
		for _, k := range varying {
			row = append(row, g.get(k))
		}
		row = append(row, fmt.Sprint(runs(g)))
		for _, u := range units {
			row = append(row, meanStd(g, u))
		}
		writeRow(b, row)
	}
	b.WriteString("\n")

	// Details: every unit of every configuration.
	for _, g := range gs {
		label := make([]string, 0, len(varying))
		for _, k := range varying {
			label = append(label, keyString(kv{k, g.get(k)}))
		}
		if len(label) == 0 {
			label = append(label, g.name)
		}
		fmt.Fprintf(b, "<details><summary>%s (%d runs)</summary>\n\n", strings.Join(label, " "), runs(g))
		writeRow(b, []string{"metric", "mean ± std", "median", "95 % CI of median", "runs"})
		writeRow(b, slices.Repeat([]string{"---"}, 5))
		for _, u := range g.units {
			st, ok := g.stat(u)
			if !ok {
				writeRow(b, []string{title(u), notMeasured, notMeasured, notMeasured, "0"})
				continue
			}
			ci := "n/a (needs 6 runs)"
			if st.ciOK {
				ci = fmt.Sprintf("[%s, %s]", format(u, st.lo), format(u, st.hi))
			}
			writeRow(b, []string{title(u), meanStd(g, u), format(u, st.median), ci, fmt.Sprint(st.n)})
		}
		b.WriteString("\n</details>\n\n")
	}
}

// writeHeadline writes the headline's table: per batch size our best
// configuration and PyTorch's, and the references.
func writeHeadline(b *strings.Builder, h *headline) {
	if h == nil {
		return
	}
	fmt.Fprintf(b, "## Headline: the best configuration at each batch size\n\n")
	switch {
	case h.ours > 0 && h.torch > 0:
		fmt.Fprintf(b, "The highest median samples/s at each batch size among %d configurations, next to PyTorch's best of %d (scripts/pytorch_bench.py)", h.ours, h.torch)
	case h.ours > 0:
		fmt.Fprintf(b, "The highest median samples/s at each batch size among %d configurations", h.ours)
	default:
		fmt.Fprintf(b, "PyTorch's highest median samples/s at each batch size among %d configurations (scripts/pytorch_bench.py)", h.torch)
	}
	if len(h.refs) > 0 {
		b.WriteString(", and figures cited from docs/SEED.md (its table of the seed measured on this workplace's H200, and its hand-written PyTorch loop): not measured by this run")
	}
	b.WriteString(".")
	if h.note != "" {
		b.WriteString(" " + h.note)
	}
	b.WriteString("\n\n")
	header := []string{"batch"}
	if h.ours > 0 {
		header = append(header, "best configuration", "samples/s (median)")
	}
	if h.torch > 0 {
		header = append(header, "best PyTorch", "PyTorch samples/s (median)")
	}
	for _, r := range h.refs {
		header = append(header, r.label)
	}
	writeRow(b, header)
	writeRow(b, slices.Repeat([]string{"---"}, len(header)))
	for _, r := range h.rows {
		row := []string{fmt.Sprint(r.batch)}
		if h.ours > 0 {
			row = append(row, pickCells(r.ours)...)
		}
		if h.torch > 0 {
			row = append(row, pickCells(r.torch)...)
		}
		for _, v := range r.refs {
			cell := notMeasured
			if !math.IsNaN(v) {
				cell = shortNum(v) // as cited, without added digits
			}
			row = append(row, cell)
		}
		writeRow(b, row)
	}
	b.WriteString("\n")
}

// pickCells returns the label and median cells of a pick, n/a for none.
func pickCells(p *pick) []string {
	if p == nil {
		return []string{notMeasured, notMeasured}
	}
	return []string{p.label, fmt.Sprintf("%s (%d runs)", format("samples/s", p.median), p.runs)}
}

// notMeasured is the cell of a figure that was not measured.
const notMeasured = "n/a"

// meanStd returns a table cell for g's unit: "mean ± std"; the mean alone
// with "(1 run)" when one run measured it; "(n of N runs)" after either
// when fewer runs measured it than g has; n/a when none did.
func meanStd(g *group, unit string) string {
	st, ok := g.stat(unit)
	if !ok {
		return notMeasured
	}
	cell := format(unit, st.mean)
	if st.n > 1 {
		cell += " ± " + format(unit, st.std)
	}
	switch all := runs(g); {
	case st.n < all:
		cell += fmt.Sprintf(" (%d of %d runs)", st.n, all)
	case st.n == 1:
		cell += " (1 run)"
	}
	return cell
}

// splitKeys returns the sub-benchmark keys whose values differ between
// configurations (table columns) and those with one value for all (stated
// once above the table).
func splitKeys(gs []*group) (varying []string, fixed []kv) {
	var order []string
	for _, g := range gs {
		for _, p := range g.keys {
			if !slices.Contains(order, p.key) {
				order = append(order, p.key)
			}
		}
	}
	for _, k := range order {
		first, same := gs[0].get(k), true
		for _, g := range gs[1:] {
			if g.get(k) != first {
				same = false
				break
			}
		}
		if same {
			fixed = append(fixed, kv{k, first})
		} else {
			varying = append(varying, k)
		}
	}
	return varying, fixed
}

// runs returns the number of runs of a configuration: the most values any
// of its units has.
func runs(g *group) int {
	n := 0
	for _, v := range g.values {
		n = max(n, len(v))
	}
	return n
}

func keyString(p kv) string {
	if p.key == "" {
		return p.value
	}
	return p.key + "=" + p.value
}

// writeRow writes one markdown table row, escaping pipes in cells.
func writeRow(b *strings.Builder, cells []string) {
	b.WriteString("|")
	for _, c := range cells {
		b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
	}
	b.WriteString("\n")
}

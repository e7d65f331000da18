package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// alwaysIgnored are the config lines that differ between two runs of one
// setup: the sweep's commit:, date: and matrix: (every configuration's name
// carries its dimensions, so the matrix's name changes no number). -ignore
// adds keys.
var alwaysIgnored = []string{"commit", "date", "matrix"}

// noteConfig records the file config lines (but ignored keys) that a result
// of benchmark name was measured under.
func (s *sample) noteConfig(name string, rec *benchfmt.Result, ignore map[string]bool) {
	byKey := s.config[name]
	if byKey == nil {
		byKey = map[string][]string{}
		s.config[name] = byKey
	}
	for _, c := range rec.Config {
		if !c.File || ignore[c.Key] {
			continue
		}
		if v := string(c.Value); !slices.Contains(byKey[c.Key], v) {
			byKey[c.Key] = append(byKey[c.Key], v)
		}
	}
}

// configDiff is one config line whose values differ for some benchmarks.
type configDiff struct {
	key        string
	base, head []string // distinct values in each file
	benchmarks int      // how many benchmarks show this difference
}

// checkConfig refuses to compare benchmarks measured under different
// settings: it returns an error naming every config line with more than one
// value for a benchmark of both files (within a file or between them), as
// benchstat would split such runs into separate tables. A line that only one
// file has cannot be compared (an older suite may not print it): it is named
// in a note written to w.
func checkConfig(w io.Writer, base, head *sample) error {
	var diffs []*configDiff
	oneSided := map[string]string{} // key -> note
	var oneSidedOrder []string
	for _, name := range slices.Sorted(maps.Keys(base.config)) {
		hc, ok := head.config[name]
		if !ok {
			continue
		}
		bc := base.config[name]
		keys := append(slices.Collect(maps.Keys(bc)), slices.Collect(maps.Keys(hc))...)
		slices.Sort(keys)
		for _, key := range slices.Compact(keys) {
			bv, hv := bc[key], hc[key]
			switch {
			case len(bv) == 0 || len(hv) == 0:
				if _, seen := oneSided[key]; !seen {
					path, vals := head.path, hv
					if len(hv) == 0 {
						path, vals = base.path, bv
					}
					oneSided[key] = fmt.Sprintf("note: only %s has a %s: line (%s): not compared", path, key, strings.Join(vals, ", "))
					oneSidedOrder = append(oneSidedOrder, key)
				}
			case len(bv) > 1 || len(hv) > 1 || bv[0] != hv[0]:
				i := slices.IndexFunc(diffs, func(d *configDiff) bool {
					return d.key == key && slices.Equal(d.base, bv) && slices.Equal(d.head, hv)
				})
				if i < 0 {
					diffs = append(diffs, &configDiff{key: key, base: bv, head: hv})
					i = len(diffs) - 1
				}
				diffs[i].benchmarks++
			}
		}
	}
	for _, key := range oneSidedOrder {
		fmt.Fprintln(w, oneSided[key])
	}
	if len(diffs) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "gate: %s and %s were measured with different settings (benchstat puts such runs in separate tables); not comparing them:", base.path, head.path)
	for _, d := range diffs {
		fmt.Fprintf(&b, "\n  %s: %s in base, %s in head (%d benchmark", d.key, strings.Join(d.base, " and "), strings.Join(d.head, " and "), d.benchmarks)
		if d.benchmarks > 1 {
			b.WriteString("s")
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, "\n(lines that differ between runs of one setup are not compared: %s; -ignore adds keys)", strings.Join(alwaysIgnored, ", "))
	return fmt.Errorf("%s", b.String())
}

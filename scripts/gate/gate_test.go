package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/gate")

// fixtures is the repository's testdata/gate directory.
const fixtures = "../../testdata/gate"

func TestGateGolden(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		golden  string
		wantErr error // nil: the gate passes
	}{
		{"planted 10% throughput regression fails", []string{"base.txt", "regression.txt"}, "regression.golden", ErrRegression},
		{"pure noise passes", []string{"base.txt", "noise.txt"}, "noise.golden", nil},
		{"significant 3% slowdown is within the 5% threshold", []string{"-changes", "base.txt", "small.txt"}, "small.golden", nil},
		{"looser threshold passes the regression", []string{"-changes", "-threshold", "20%", "base.txt", "regression.txt"}, "regression-20pct.golden", nil},
		{"per-unit threshold and unit selection", []string{"-units", "samples/s,req/s,p99-latency-ns", "-threshold", "samples/s=15%,req/s=off", "base.txt", "regression.txt"}, "regression-units.golden", ErrRegression},
		{"filter keeps the unchanged benchmark only", []string{"-filter", "/batch:1", "base.txt", "regression.txt"}, "regression-batch1.golden", nil},
		{"every unit", []string{"-units", "all", "base.txt", "regression.txt"}, "regression-all.golden", ErrRegression},
		{"reversed files report an improvement", []string{"-changes", "-units", "samples/s", "regression.txt", "base.txt"}, "improved.golden", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// cpu-sec/op's scale depends on -cores, which defaults to this
			// machine's.
			args := []string{"-cores", "2"}
			for _, a := range tt.args {
				if filepath.Ext(a) == ".txt" {
					a = filepath.Join(fixtures, a)
				}
				args = append(args, a)
			}
			var stdout, stderr bytes.Buffer
			err := run(args, &stdout, &stderr)
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
			golden := filepath.Join(fixtures, tt.golden)
			if *update {
				require.NoError(t, os.WriteFile(golden, stdout.Bytes(), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run with -update to create the golden file")
			assert.Equal(t, string(want), stdout.String())
			assert.Empty(t, stderr.String())
		})
	}
}

func TestGateErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantMsg string
	}{
		{"too few runs", []string{filepath.Join(fixtures, "base.txt"), filepath.Join(fixtures, "few.txt")}, "need at least 6 runs per side"},
		{"one file", []string{filepath.Join(fixtures, "base.txt")}, "need exactly two files"},
		{"missing file", []string{"nonexistent.txt", filepath.Join(fixtures, "base.txt")}, "nonexistent.txt"},
		{"bad threshold", []string{"-threshold", "fast", "a", "b"}, `bad threshold "fast"`},
		{"bad alpha", []string{"-alpha", "2", "a", "b"}, "-alpha 2 out of (0, 1)"},
		{"bad filter", []string{"-filter", "/batch:(", "a", "b"}, "-filter"},
		{"too few runs for so many comparisons", []string{"-min-runs", "4", "-units", "all", filepath.Join(fixtures, "base.txt"), filepath.Join(fixtures, "few.txt")},
			"gate: 34 comparisons: Holm-Bonferroni needs p < 0.0015 (alpha/34) for the first, but 4 runs per side give at best p = 0.004; run at least 7 per side"},
		{"nothing in both files", []string{"-filter", "/batch:1", filepath.Join(fixtures, "base.txt"), filepath.Join(fixtures, "tiny-64.txt")},
			"no benchmark and unit is in both"},
		{"ResNet-18 250x250 against tiny 64x64", []string{filepath.Join(fixtures, "resnet18-250.txt"), filepath.Join(fixtures, "tiny-64.txt")},
			"were measured with different settings (benchstat puts such runs in separate tables); not comparing them:\n" +
				"  model: resnet18 in base, tiny in head (1 benchmark)\n  size: 250x250 in base, 64x64 in head (1 benchmark)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(tt.args, &stdout, &stderr)
			require.Error(t, err)
			assert.NotErrorIs(t, err, ErrRegression)
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.Regexp(t, "^gate: ", err.Error())
		})
	}
}

func TestThresholds(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		unit  string // tidied
		want  float64
	}{
		{"default", nil, "sec/op", 0.05},
		{"new default", []string{"10%"}, "sec/op", 0.10},
		{"number without percent sign", []string{"7.5"}, "sec/op", 0.075},
		{"per unit, tidied", []string{"p99-latency-ns=20%"}, "p99-latency-sec", 0.20},
		{"per unit does not change others", []string{"p99-latency-ns=20%"}, "p50-latency-sec", 0.05},
		{"off", []string{"cpu-util-pct=off"}, "cpu-util-pct", -1},
		{"comma list, last wins", []string{"samples/s=3%,samples/s=4%", "2%"}, "samples/s", 0.04},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := &thresholds{def: 0.05, perUnit: map[string]float64{}}
			for _, f := range tt.flags {
				require.NoError(t, th.Set(f))
			}
			assert.InDelta(t, tt.want, th.of(tt.unit), 1e-12, "threshold of %s after %q", tt.unit, tt.flags)
		})
	}
}

func TestJudge(t *testing.T) {
	sig := func(v verdict) verdict { v.cmp.P, v.holmP, v.cmp.Alpha = 0.001, 0.001, 0.05; return v }
	tests := []struct {
		name string
		v    verdict
		want status
	}{
		{"significant alone but not after Holm", verdict{better: -1, delta: 0.5, threshold: 0.05, cmp: benchmath.Comparison{P: 0.01, Alpha: 0.05}, holmP: 0.13}, unchanged},
		{"sub-µs figure changed by less than 5 % of the 1 µs floor", sig(verdict{better: -1, base: 100e-9, head: 140e-9, delta: 0.4, threshold: 0.05, floor: 1e-6}), underFloor},
		{"sub-µs figure changed by more than 5 % of the 1 µs floor", sig(verdict{better: -1, base: 100e-9, head: 160e-9, delta: 0.6, threshold: 0.05, floor: 1e-6}), regressed},
		{"figure above the floor is judged on its own", sig(verdict{better: -1, base: 2e-6, head: 2.2e-6, delta: 0.1, threshold: 0.05, floor: 1e-6}), regressed},
		{"not significant", verdict{better: -1, delta: 0.5, threshold: 0.05}, unchanged},
		{"slower beyond threshold", sig(verdict{better: -1, delta: 0.06, threshold: 0.05}), regressed},
		{"fewer samples/s beyond threshold", sig(verdict{better: 1, delta: -0.10, threshold: 0.05}), regressed},
		{"slower within threshold", sig(verdict{better: -1, delta: 0.04, threshold: 0.05}), tolerated},
		{"faster", sig(verdict{better: -1, delta: -0.5, threshold: 0.05}), improved},
		{"more samples/s", sig(verdict{better: 1, delta: 0.5, threshold: 0.05}), improved},
		{"gate off", sig(verdict{better: -1, delta: 0.5, threshold: -1}), ungated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, judge(tt.v), "judge(%+v)", tt.v)
		})
	}
}

func TestCompareOnlyOneSide(t *testing.T) {
	cfg, err := parseFlags([]string{"a", "b"}, &bytes.Buffer{})
	require.NoError(t, err)
	six := []float64{1, 1.01, 0.99, 1.02, 0.98, 1}
	base := &sample{
		values: map[groupKey][]float64{{"A", "sec/op"}: six, {"Gone", "sec/op"}: six},
		order:  []groupKey{{"A", "sec/op"}, {"Gone", "sec/op"}},
	}
	head := &sample{
		values: map[groupKey][]float64{{"A", "sec/op"}: six, {"New", "sec/op"}: six},
		order:  []groupKey{{"New", "sec/op"}, {"A", "sec/op"}},
	}
	vs, err := compare(base, head, cfg)
	require.NoError(t, err)
	got := map[string]status{}
	for _, v := range vs {
		got[v.key.name] = v.status
	}
	assert.Equal(t, map[string]status{"A": unchanged, "Gone": onlyBase, "New": onlyHead}, got)

	var out bytes.Buffer
	require.NoError(t, summarize(&out, vs), "benchmarks on one side only must not fail the gate")
	assert.Contains(t, out.String(), "1 comparisons, 1 gated (p-values adjusted by Holm-Bonferroni): 0 regressed")
	assert.Contains(t, out.String(), "1 only in base, 1 only in head")
}

func TestWithCPUCost(t *testing.T) {
	util := benchfmt.Value{Value: 50, Unit: "cpu-util-pct"}
	secOp := benchfmt.Value{Value: 2e-3, Unit: "sec/op"}
	own := benchfmt.Value{Value: 7e-3, Unit: cpuCostUnit}
	tests := []struct {
		name  string
		vals  []benchfmt.Value
		cores int
		want  float64 // the cpu-sec/op value, 0 for none
	}{
		{"half of 2 cores for 2 ms an op", []benchfmt.Value{secOp, util}, 2, 2e-3},
		{"half of 4 cores", []benchfmt.Value{util, secOp}, 4, 4e-3},
		{"no utilisation", []benchfmt.Value{secOp}, 2, 0},
		{"no sec/op", []benchfmt.Value{util}, 2, 0},
		{"-cores 0", []benchfmt.Value{secOp, util}, 0, 0},
		{"the benchmark reports its own", []benchfmt.Value{secOp, util, own}, 2, 7e-3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []float64
			for _, v := range withCPUCost(tt.vals, tt.cores) {
				if v.Unit == cpuCostUnit {
					got = append(got, v.Value)
				}
			}
			if tt.want == 0 {
				assert.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			assert.InDelta(t, tt.want, got[0], 1e-12)
		})
	}
}

// TestPrimary: without -units each benchmark is gated on the first -primary
// unit that both files report; its other units are secondary.
func TestPrimary(t *testing.T) {
	six := []float64{1, 1.01, 0.99, 1.02, 0.98, 1}
	mk := func(keys ...groupKey) *sample {
		s := &sample{values: map[groupKey][]float64{}}
		for _, k := range keys {
			s.values[k] = six
			s.order = append(s.order, k)
		}
		return s
	}
	tests := []struct {
		name       string
		flags      []string
		base, head *sample
		want       map[string]bool // unit -> gated
	}{
		{"CPU cost first", nil,
			mk(groupKey{"A", "samples/s"}, groupKey{"A", "p50-latency-sec"}, groupKey{"A", cpuCostUnit}),
			mk(groupKey{"A", "samples/s"}, groupKey{"A", "p50-latency-sec"}, groupKey{"A", cpuCostUnit}),
			map[string]bool{"samples/s": false, "p50-latency-sec": false, cpuCostUnit: true}},
		{"p50 without CPU cost", nil,
			mk(groupKey{"A", "req/s"}, groupKey{"A", "p50-latency-sec"}, groupKey{"A", "p99-latency-sec"}),
			mk(groupKey{"A", "req/s"}, groupKey{"A", "p50-latency-sec"}, groupKey{"A", "p99-latency-sec"}),
			map[string]bool{"req/s": false, "p50-latency-sec": true, "p99-latency-sec": false}},
		{"CPU cost only in head: the next unit both have", nil,
			mk(groupKey{"A", "samples/s"}),
			mk(groupKey{"A", "samples/s"}, groupKey{"A", cpuCostUnit}),
			map[string]bool{"samples/s": true}},
		{"-primary", []string{"-primary", "p99-latency-ns"},
			mk(groupKey{"A", "req/s"}, groupKey{"A", "p50-latency-sec"}, groupKey{"A", "p99-latency-sec"}),
			mk(groupKey{"A", "req/s"}, groupKey{"A", "p50-latency-sec"}, groupKey{"A", "p99-latency-sec"}),
			map[string]bool{"req/s": false, "p50-latency-sec": false, "p99-latency-sec": true}},
		{"-units gates every unit named", []string{"-units", "req/s,p99-latency-sec"},
			mk(groupKey{"A", "req/s"}, groupKey{"A", "p50-latency-sec"}, groupKey{"A", "p99-latency-sec"}),
			mk(groupKey{"A", "req/s"}, groupKey{"A", "p50-latency-sec"}, groupKey{"A", "p99-latency-sec"}),
			map[string]bool{"req/s": true, "p99-latency-sec": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(append(tt.flags, "a", "b"), &bytes.Buffer{})
			require.NoError(t, err)
			if cfg.units != nil {
				// readFile drops the units -units does not name.
				for _, s := range []*sample{tt.base, tt.head} {
					for k := range s.values {
						if !cfg.units[k.unit] {
							delete(s.values, k)
						}
					}
					s.order = slices.DeleteFunc(s.order, func(k groupKey) bool { return !cfg.units[k.unit] })
				}
			}
			vs, err := compare(tt.base, tt.head, cfg)
			require.NoError(t, err)
			got := map[string]bool{}
			for _, v := range vs {
				if v.status == onlyHead || v.status == onlyBase {
					continue
				}
				got[v.key.unit] = v.gated()
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// synthUnit is one unit of a synthetic benchmark result: a typical value and
// how it varies from run to run.
type synthUnit struct {
	name   string  // as the suite prints it
	better string  // higher or lower
	center float64 // typical value
	sigma  float64 // relative noise of the unit alone (log-normal)
	speed  float64 // exponent of the run's slowness: 1 for times, -1 for rates, 0 for neither
	steal  float64 // exponent of the share of the cores others took: speed's, but -1 for CPU utilisation
}

// synthUnits are the 21 units of the suite's BenchmarkServer on the CPU
// back-end with the tiny model. The centres are of the order the suite
// prints; the noise is larger for tails and for sub-microsecond stages, as
// on a shared machine. Time others take from the cores stretches times and
// lowers the CPU utilisation alike, so the CPU time per operation (the
// gate's cpu-sec/op) moves only by the utilisation's own 3 %, the spread of
// CPU time per request measured on the 2-core machine beside other jobs.
var synthUnits = []synthUnit{
	{"ns/op", "lower", 206e3, 0.01, 1, 1},
	{"samples/s", "higher", 4850, 0.01, -1, -1},
	{"req/s", "higher", 4850, 0.01, -1, -1},
	{"mean-latency-ns", "lower", 690e3, 0.03, 1, 1},
	{"std-latency-ns", "lower", 380e3, 0.10, 1, 1},
	{"min-latency-ns", "lower", 190e3, 0.08, 1, 1},
	{"max-latency-ns", "lower", 1.4e6, 0.15, 1, 1},
	{"p50-latency-ns", "lower", 650e3, 0.03, 1, 1},
	{"p90-latency-ns", "lower", 1.2e6, 0.05, 1, 1},
	{"p99-latency-ns", "lower", 1.35e6, 0.08, 1, 1},
	{"p999-latency-ns", "lower", 1.4e6, 0.15, 1, 1},
	{"warmup-ns", "lower", 2.1e6, 0.20, 1, 1},
	{"load-ns", "lower", 800, 0.30, 0, 0},
	{"setup-ns", "lower", 1.2e6, 0.20, 1, 1},
	{"first-ns", "lower", 900e3, 0.25, 1, 1},
	{"queue-ns", "lower", 350e3, 0.08, 1, 1},
	{"h2d-ns", "lower", 97, 0.30, 0, 0},
	{"compute-ns", "lower", 195e3, 0.04, 1, 1},
	{"d2h-ns", "lower", 100, 0.40, 0, 0},
	{"cpu-util-pct", "higher", 58, 0.03, 0, -1},
	{"mean-batch", "higher", 1, 0, 0, 0},
}

// synthFile returns a benchmark file of configs configurations of
// BenchmarkServer with runs results each. Every run has a share of the cores
// taken by others, a slowness shared by its units (3 % log-normal, and a
// 25 % hiccup in one run of 20) and by busier, times each unit's own noise;
// slower is a slowness of configuration 0's code, which costs CPU time too.
func synthFile(rng *rand.Rand, configs, runs int, slower, busier float64) string {
	var b strings.Builder
	b.WriteString("backend: cpu\ngomaxprocs: 2\n")
	for _, u := range synthUnits {
		fmt.Fprintf(&b, "Unit %s better=%s\n", u.name, u.better)
	}
	for run := 0; run < runs; run++ {
		for c := 0; c < configs; c++ {
			steal := busier * math.Exp(0.03*rng.NormFloat64())
			if rng.Float64() < 0.05 {
				steal *= 1.25
			}
			slow := 1.0
			if c == 0 {
				slow = slower
			}
			fmt.Fprintf(&b, "BenchmarkServer/backend=cpu/batch=%d/workers=1-2 \t200", 1<<c)
			for _, u := range synthUnits {
				v := u.center * math.Pow(slow, u.speed) * math.Pow(steal, u.steal) * math.Exp(u.sigma*rng.NormFloat64())
				fmt.Fprintf(&b, "\t%.6g %s", v, u.name)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// TestGateFalseAlarms runs the gate on many pairs of synthetic files drawn
// from one distribution (4 configurations x 21 units, 10 runs a side, the
// shape of the sweeps that failed 2 of 5 identical pairs): it must fail at
// most 5 % of them, with the default units and with every unit. A planted
// 10 % slowdown of one configuration must still fail most pairs, on that
// configuration. Both hold when every run of head was slowed by others'
// load (a busier machine), which moves wall times but not the CPU time per
// operation the gate is gated on by default.
func TestGateFalseAlarms(t *testing.T) {
	const pairs = 200
	tests := []struct {
		name    string
		flags   []string
		slower  float64 // slowness of configuration 0 in head
		busier  float64 // slowness of every run of head from others' load
		minFail float64 // smallest fraction of pairs that must fail
		maxFail float64 // largest fraction of pairs that may fail
	}{
		{"identical, default units", nil, 1, 1, 0, 0.05},
		{"identical, every unit", []string{"-units", "all"}, 1, 1, 0, 0.05},
		{"identical, head 30 % busier, default units", nil, 1, 1.3, 0, 0.05},
		{"10 % slower, default units", nil, 1.10, 1, 0.80, 1},
		{"10 % slower, head 30 % busier, default units", nil, 1.10, 1.3, 0.80, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(20, 4))
			dir := t.TempDir()
			base, head := filepath.Join(dir, "base.txt"), filepath.Join(dir, "head.txt")
			failed := 0
			for i := 0; i < pairs; i++ {
				require.NoError(t, os.WriteFile(base, []byte(synthFile(rng, 4, 10, 1, 1)), 0o644))
				require.NoError(t, os.WriteFile(head, []byte(synthFile(rng, 4, 10, tt.slower, tt.busier)), 0o644))
				var stdout, stderr bytes.Buffer
				err := run(append(tt.flags, base, head), &stdout, &stderr)
				if errors.Is(err, ErrRegression) {
					failed++
					if tt.slower != 1 {
						// The slowed configuration is the first in the table.
						planted, _, _ := strings.Cut(stdout.String(), "\nServer/backend=cpu/batch=2/")
						assert.Contains(t, planted, "REGRESSION", "the gate failed on a configuration that did not change:\n%s", stdout.String())
					}
					continue
				}
				require.NoError(t, err)
			}
			rate := float64(failed) / pairs
			t.Logf("%d of %d pairs failed the gate (%.1f %%)", failed, pairs, 100*rate)
			assert.GreaterOrEqual(t, rate, tt.minFail, "failed %d of %d pairs", failed, pairs)
			assert.LessOrEqual(t, rate, tt.maxFail, "failed %d of %d pairs", failed, pairs)
		})
	}
}

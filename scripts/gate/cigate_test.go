package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeTestBinary is a stand-in for the root test binary that ci-gate.sh
// runs: it lists two BenchmarkServer benchmarks, accepts any suite flag and
// prints -test.count results of BenchmarkServerOverhead whose p50 is P50
// (the process's first run is 5x slower, as a cold process might be), and
// appends SIDE to the file ORDER.
const fakeTestBinary = `#!/usr/bin/env bash
set -eu
count=1 list= bench=
while [ $# -gt 0 ]; do
	case $1 in
	-test.list) list=$2; shift ;;
	-test.bench) bench=$2; shift ;;
	-test.count) count=$2; shift ;;
	-test.run | -test.benchtime) shift ;;
	esac
	shift
done
if [ -n "$list" ]; then
	[ "$list" = '^$' ] || printf 'BenchmarkServer\nBenchmarkServerOverhead\n'
	exit 0
fi
echo SIDE >>ORDER
printf 'goos: linux\npkg: fake\nUnit p50-latency-ns better=lower\n'
for i in $(seq "$count"); do
	p50=$((P50 + RANDOM % 10))
	[ "$i" -gt 1 ] || p50=$((5 * P50))
	printf 'BenchmarkServerOverhead/clients=1-2 \t1000\t2000 ns/op\t%d p50-latency-ns\n' "$p50"
done
`

// TestCIGate runs scripts/ci-gate.sh on fake test binaries (GATE_BINS) and
// the gate itself (this test binary running main): the processes alternate
// A B B A, the first run of each process is dropped, and the exit status is
// the gate's.
func TestCIGate(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on PATH")
	}
	script, err := filepath.Abs("../ci-gate.sh")
	require.NoError(t, err)
	tests := []struct {
		name       string
		base, head int // p50 in ns
		env        []string
		want       int // exit status
		wantOut    string
	}{
		{"identical code passes", 1000, 1000, nil, 0, "gate: PASS"},
		{"30 % slower fails", 1000, 1300, nil, 1, "REGRESSION"},
		{"too few rounds", 1000, 1000, []string{"GATE_ROUNDS=5"}, 2, "at least 6 processes"},
		{"one run per process leaves none", 1000, 1000, []string{"GATE_COUNT=1"}, 2, "at least 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			order := filepath.Join(dir, "order.txt")
			for side, p50 := range map[string]int{"base": tt.base, "head": tt.head} {
				body := strings.NewReplacer("SIDE", side, "ORDER", order, "P50", fmt.Sprint(p50)).Replace(fakeTestBinary)
				require.NoError(t, os.WriteFile(filepath.Join(dir, side+".test"), []byte(body), 0o755))
			}
			gate := fmt.Sprintf("#!/bin/sh\nINFERBENCH_RUN_MAIN=1 exec %q \"$@\"\n", os.Args[0])
			require.NoError(t, os.WriteFile(filepath.Join(dir, "gate"), []byte(gate), 0o755))
			out := filepath.Join(dir, "out")
			cmd := exec.Command(bash, script)
			cmd.Env = append(os.Environ(), "GATE_BINS="+dir, "GATE_OUT="+out, "GATE_ROUNDS=6", "GATE_COUNT=3",
				"GATE_SPECS=^BenchmarkServerOverhead$")
			cmd.Env = append(cmd.Env, tt.env...)
			stdout, err := cmd.CombinedOutput()
			got := 0
			if ee := (*exec.ExitError)(nil); err != nil {
				require.ErrorAs(t, err, &ee)
				got = ee.ExitCode()
			}
			require.Equal(t, tt.want, got, "exit status; output:\n%s", stdout)
			assert.Contains(t, string(stdout), tt.wantOut)
			if tt.want == 2 {
				return
			}
			seq, err := os.ReadFile(order)
			require.NoError(t, err)
			assert.Equal(t, strings.Repeat("base\nhead\nhead\nbase\n", 3), string(seq), "processes alternate A B B A")
			for _, side := range []string{"base", "head"} {
				kept, err := os.ReadFile(filepath.Join(out, side+".txt"))
				require.NoError(t, err)
				raw, err := os.ReadFile(filepath.Join(out, side+".raw.txt"))
				require.NoError(t, err)
				assert.Equal(t, 6*3, strings.Count(string(raw), "\nBenchmark"), "%s: every run in the raw file", side)
				assert.Equal(t, 6*2, strings.Count(string(kept), "\nBenchmark"), "%s: two runs of three kept per process", side)
				assert.NotContains(t, string(kept), fmt.Sprintf("\t%d p50", 5*map[string]int{"base": tt.base, "head": tt.head}[side]), "%s: a first run was kept", side)
			}
		})
	}
}

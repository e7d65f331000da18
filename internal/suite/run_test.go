package suite

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestReporterProgressAndSummary(t *testing.T) {
	var w bytes.Buffer
	r := &reporter{w: &w}
	r.started("BenchmarkServer/batch=1", 0, 2)
	r.started("BenchmarkServer/batch=8", 1, 2)
	r.add(&exportRun{name: "BenchmarkServer/batch=1", figs: []figure{{"samples/s", 100}, {"p50-latency-ns", 2e6}, {"p99-latency-ns", 3e6}}})
	r.add(&exportRun{name: "BenchmarkServer/batch=8", figs: []figure{{"samples/s", 800}, {"p50-latency-ns", 1234567}, {"p99-latency-ns", 9.5e6}}})
	r.add(&exportRun{name: "BenchmarkServer/batch=1", figs: []figure{{"samples/s", 300}, {"p50-latency-ns", 4e6}, {"p99-latency-ns", 5e6}}})
	r.summary()
	lines := strings.Split(strings.TrimSpace(w.String()), "\n")
	assert.Equal(t, []string{
		"[1/2] BenchmarkServer/batch=1",
		"[2/2] BenchmarkServer/batch=8",
		"summary (the mean of each configuration's runs):",
	}, lines[:3])
	var rows [][]string
	for _, l := range lines[3:] {
		rows = append(rows, strings.Fields(l))
	}
	assert.Equal(t, [][]string{
		{"configuration", "runs", "samples/s", "p50", "p99"},
		{"Server/batch=1", "2", "200.0", "3ms", "4ms"},
		{"Server/batch=8", "1", "800.0", "1.23ms", "9.5ms"},
	}, rows, "no max req/s column: no configuration has one")

	w.Reset()
	r.summary()
	assert.Empty(t, w.String(), "the summary forgets what it printed")

	r.skipped("BenchmarkCapacity", "name it to run it")
	assert.Equal(t, "[skipped] BenchmarkCapacity: name it to run it\n", w.String())
}

func TestFormatNs(t *testing.T) {
	for ns, want := range map[float64]string{999: "999ns", 1234: "1.23µs", 226170: "226µs", 1e9 + 4e6: "1s"} {
		assert.Equal(t, want, formatNs(ns), "formatNs(%v)", ns)
	}
}

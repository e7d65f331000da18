package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/inferbench/inferbench/internal/suite"
)

// matrix is a set of benchmark configurations: the cross product of its
// dimensions, which are the suite's (suite.Dimensions). Each is passed to the
// suite as its comma-separated list flag; a dimension the matrix leaves
// empty is not passed, so the suite's default applies.
type matrix struct {
	vals      map[string][]string // by the dimension's flag
	benchtime string              // default -test.benchtime (requests per run), e.g. 100x
	doc       string
}

// dims lists the suite's dimensions with the flags sweep passes, in the
// order of the suite's names.
func dims() []suite.Dimension {
	var out []suite.Dimension
	for _, d := range suite.Dimensions() {
		if d.Flag != "" {
			out = append(out, d)
		}
	}
	return out
}

// matrices are the named sweeps.
var matrices = map[string]matrix{
	"seed": {
		doc: "the seed's experiments on the GPU: batch x workers x pipeline, fp32, no graphs, burst of 100 requests",
		vals: map[string][]string{
			suite.FlagBackends: {"cuda"}, suite.FlagBatches: {"1", "32", "64", "128", "256"},
			suite.FlagWorkers: {"1", "2", "4"}, suite.FlagPipelines: {"serial", "overlap"},
			suite.FlagPrecisions: {"fp32"}, suite.FlagGraphs: {"off"}, suite.FlagDevices: {"1"}, suite.FlagLoads: {"burst"},
		},
		benchtime: "100x",
	},
	"cpu-quick": {
		doc: "a few minutes on a CPU-only machine",
		vals: map[string][]string{
			suite.FlagBackends: {"cpu"}, suite.FlagBatches: {"1", "8"},
			suite.FlagWorkers: {"1", "2"}, suite.FlagPipelines: {"serial"},
			suite.FlagPrecisions: {"fp32"}, suite.FlagGraphs: {"off"}, suite.FlagDevices: {"1"}, suite.FlagLoads: {"burst"},
		},
		benchtime: "20x",
	},
	"gpu-full": {
		doc: "the seed matrix x precision x CUDA graphs",
		vals: map[string][]string{
			suite.FlagBackends: {"cuda"}, suite.FlagBatches: {"1", "32", "64", "128", "256"},
			suite.FlagWorkers: {"1", "2", "4"}, suite.FlagPipelines: {"serial", "overlap"},
			suite.FlagPrecisions: {"fp32", "tf32", "fp16"}, suite.FlagGraphs: {"off", "on"}, suite.FlagDevices: {"1"}, suite.FlagLoads: {"burst"},
		},
		benchtime: "100x",
	},
	"loads": {
		doc: "one fast GPU setting under burst, closed-loop and open-loop load",
		vals: map[string][]string{
			suite.FlagBackends: {"cuda"}, suite.FlagBatches: {"1", "32"},
			suite.FlagWorkers: {"2"}, suite.FlagPipelines: {"overlap"},
			suite.FlagPrecisions: {"fp16"}, suite.FlagGraphs: {"on"}, suite.FlagDevices: {"1"}, suite.FlagLoads: {"burst", "closed", "open"},
		},
		benchtime: "200x",
	},
	"inputs": {
		doc: "one fast GPU setting with uint8 input (normalised on the GPU) and float32 input, burst",
		vals: map[string][]string{
			suite.FlagBackends: {"cuda"}, suite.FlagBatches: {"32", "256"},
			suite.FlagWorkers: {"2"}, suite.FlagPipelines: {"overlap"},
			suite.FlagPrecisions: {"fp16"}, suite.FlagGraphs: {"on"}, suite.FlagDevices: {"1"}, suite.FlagInput: {"fp32", "uint8"},
			suite.FlagLoads: {"burst"},
		},
		benchtime: "200x",
	},
	"batching": {
		doc: "batch-1 bursts with more workers and with the server's dynamic batcher",
		vals: map[string][]string{
			suite.FlagBackends: {"cuda"}, suite.FlagBatches: {"1"},
			suite.FlagWorkers: {"2", "4", "8"}, suite.FlagPipelines: {"overlap"},
			suite.FlagPrecisions: {"fp16"}, suite.FlagGraphs: {"on"}, suite.FlagDevices: {"1"}, suite.FlagBatching: {"off", "on"},
			suite.FlagLoads: {"burst"},
		},
		benchtime: "600x",
	},
	"transports": {
		doc: "one fast GPU setting in process and over every wire transport, closed loop (give -- -serve-bin where Go is missing)",
		vals: map[string][]string{
			suite.FlagBackends: {"cuda"}, suite.FlagBatches: {"1", "32", "256"},
			suite.FlagWorkers: {"2"}, suite.FlagPipelines: {"overlap"},
			suite.FlagPrecisions: {"fp16"}, suite.FlagGraphs: {"on"}, suite.FlagDevices: {"1"}, suite.FlagLoads: {"closed"},
			suite.FlagTransports: {"inproc", "grpc", "http", "grpc-shm", "http-shm"},
		},
		benchtime: "200x",
	},
}

// size returns the number of configurations (an upper bound where a
// dimension applies to some loads only: -concurrency, -rate).
func (m *matrix) size() int {
	n := 1
	for _, d := range dims() {
		n *= max(1, len(m.vals[d.Flag])) // an empty dimension is the suite's one default
	}
	return n
}

// suiteArgs returns the suite flags that select the matrix.
func (m *matrix) suiteArgs() []string {
	var args []string
	for _, d := range dims() {
		if v := m.vals[d.Flag]; len(v) > 0 {
			args = append(args, "-"+d.Flag+"="+strings.Join(v, ","))
		}
	}
	return args
}

// with returns a copy of m whose dimension flag has vals.
func (m matrix) with(flag string, vals []string) matrix {
	c := make(map[string][]string, len(m.vals)+1)
	for k, v := range m.vals {
		c[k] = v
	}
	c[flag] = vals
	m.vals = c
	return m
}

// usesCUDA reports whether any configuration runs on the cuda back-end.
func (m *matrix) usesCUDA() bool {
	return slices.Contains(m.vals[suite.FlagBackends], "cuda")
}

// matrixHelp lists the named matrices for -help.
func matrixHelp() string {
	names := make([]string, 0, len(matrices))
	for n := range matrices {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		m := matrices[n]
		fmt.Fprintf(&b, "  %-10s %d configurations: %s\n", n, m.size(), m.doc)
	}
	return b.String()
}

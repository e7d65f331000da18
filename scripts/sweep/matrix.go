package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// matrix is a set of benchmark configurations: the cross product of its
// dimensions. Each dimension is passed to the suite as a comma-separated list
// flag of the same name; an empty one (inputs, batching and transports, unless set) is
// not passed, so the suite's default applies.
type matrix struct {
	backends, batches, workers, pipelines, precisions, graphs, devices, loads []string
	inputs, batching, transports                                              []string
	benchtime                                                                 string // default -test.benchtime (requests per run), e.g. 100x
	doc                                                                       string
}

// matrices are the named sweeps.
var matrices = map[string]matrix{
	"seed": {
		doc:      "the seed's experiments on the GPU: batch x workers x pipeline, fp32, no graphs, burst of 100 requests",
		backends: []string{"cuda"}, batches: []string{"1", "32", "64", "128", "256"},
		workers: []string{"1", "2", "4"}, pipelines: []string{"serial", "overlap"},
		precisions: []string{"fp32"}, graphs: []string{"off"}, devices: []string{"1"}, loads: []string{"burst"},
		benchtime: "100x",
	},
	"cpu-quick": {
		doc:      "a few minutes on a CPU-only machine",
		backends: []string{"cpu"}, batches: []string{"1", "8"},
		workers: []string{"1", "2"}, pipelines: []string{"serial"},
		precisions: []string{"fp32"}, graphs: []string{"off"}, devices: []string{"1"}, loads: []string{"burst"},
		benchtime: "20x",
	},
	"gpu-full": {
		doc:      "the seed matrix x precision x CUDA graphs",
		backends: []string{"cuda"}, batches: []string{"1", "32", "64", "128", "256"},
		workers: []string{"1", "2", "4"}, pipelines: []string{"serial", "overlap"},
		precisions: []string{"fp32", "tf32", "fp16"}, graphs: []string{"off", "on"}, devices: []string{"1"}, loads: []string{"burst"},
		benchtime: "100x",
	},
	"loads": {
		doc:      "one fast GPU setting under burst, closed-loop and open-loop load",
		backends: []string{"cuda"}, batches: []string{"1", "32"},
		workers: []string{"2"}, pipelines: []string{"overlap"},
		precisions: []string{"fp16"}, graphs: []string{"on"}, devices: []string{"1"}, loads: []string{"burst", "closed", "open"},
		benchtime: "200x",
	},
	"inputs": {
		doc:      "one fast GPU setting with uint8 input (normalised on the GPU) and float32 input, burst",
		backends: []string{"cuda"}, batches: []string{"32", "256"},
		workers: []string{"2"}, pipelines: []string{"overlap"},
		precisions: []string{"fp16"}, graphs: []string{"on"}, devices: []string{"1"}, inputs: []string{"fp32", "uint8"},
		loads: []string{"burst"}, benchtime: "200x",
	},
	"batching": {
		doc:      "batch-1 bursts with more workers and with the server's dynamic batcher",
		backends: []string{"cuda"}, batches: []string{"1"},
		workers: []string{"2", "4", "8"}, pipelines: []string{"overlap"},
		precisions: []string{"fp16"}, graphs: []string{"on"}, devices: []string{"1"}, batching: []string{"off", "on"},
		loads: []string{"burst"}, benchtime: "600x",
	},
	"transports": {
		doc:      "one fast GPU setting in process and over every wire transport, closed loop (give -- -serve-bin where Go is missing)",
		backends: []string{"cuda"}, batches: []string{"1", "32", "256"},
		workers: []string{"2"}, pipelines: []string{"overlap"},
		precisions: []string{"fp16"}, graphs: []string{"on"}, devices: []string{"1"}, loads: []string{"closed"},
		transports: []string{"inproc", "grpc", "http", "grpc-shm", "http-shm"},
		benchtime:  "200x",
	},
}

// dims returns the matrix's dimensions with their flag names, in the order
// the suite names its sub-benchmarks.
func (m *matrix) dims() []struct {
	name string
	vals *[]string
} {
	return []struct {
		name string
		vals *[]string
	}{
		{"backends", &m.backends}, {"batches", &m.batches}, {"workers", &m.workers},
		{"pipelines", &m.pipelines}, {"precisions", &m.precisions}, {"graphs", &m.graphs},
		{"devices", &m.devices}, {"input", &m.inputs}, {"batching", &m.batching}, {"loads", &m.loads}, {"transports", &m.transports},
	}
}

// size returns the number of configurations.
func (m *matrix) size() int {
	n := 1
	for _, d := range m.dims() {
		n *= max(1, len(*d.vals)) // an empty dimension is the suite's one default
	}
	return n
}

// suiteArgs returns the suite flags that select the matrix.
func (m *matrix) suiteArgs() []string {
	var args []string
	for _, d := range m.dims() {
		if len(*d.vals) > 0 {
			args = append(args, "-"+d.name+"="+strings.Join(*d.vals, ","))
		}
	}
	return args
}

// usesCUDA reports whether any configuration runs on the cuda back-end.
func (m *matrix) usesCUDA() bool {
	return slices.Contains(m.backends, "cuda")
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

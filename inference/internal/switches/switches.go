// Package switches is the one place the module reads its environment
// variables: the switches that change how a back-end computes or what it
// records, without a flag or a Config field. Each has one definition here
// (its name, its values, what it does); the packages that act on one ask it
// for its value, and Set lists those set so that a server's config lines
// echo those that change how it computes (the config line "switches").
package switches

import "os"

// A Switch is one environment variable.
type Switch struct {
	// Name is the variable's name.
	Name string
	// Values are the values it takes besides unset; nil means any value (a
	// file path).
	Values []string
	// Doc says what it does, in one sentence.
	Doc string
}

// The switches. Each package that reads one names it here and nowhere else.
var (
	GemmKernel = &Switch{Name: "INFERBENCH_GEMM_KERNEL", Values: []string{"generic", "avx2", "avx512"},
		Doc: "the CPU's matrix-product micro-kernel when gemm.Config.Kernel is empty (default: the fastest this CPU has)"}
	CUDNNSearch = &Switch{Name: "INFERBENCH_CUDNN_SEARCH", Values: []string{"quick", "exhaustive"},
		Doc: "how the cuda back-end chooses convolution algorithms (default quick)"}
	CUDNNCache = &Switch{Name: "INFERBENCH_CUDNN_CACHE",
		Doc: "the cuda back-end's algorithm cache file when backend.Options.AlgoCache is empty, or off"}
	CUDATimeline = &Switch{Name: "INFERBENCH_CUDA_TIMELINE",
		Doc: "a file the cuda back-end writes the timeline of its start-up to"}
)

// All lists every switch.
var All = []*Switch{GemmKernel, CUDNNSearch, CUDNNCache, CUDATimeline}

// Value is the variable's value as set, "" when unset.
func (s *Switch) Value() string { return os.Getenv(s.Name) }

// Set returns NAME=value for every switch of Values set in the environment,
// in All's order. Those that name a file are left out: their back-end
// reports the file in config lines of its own, and a path that differs from
// run to run would keep benchstat from lining the runs up.
func Set() []string {
	var out []string
	for _, s := range All {
		if v, ok := os.LookupEnv(s.Name); ok && s.Values != nil {
			out = append(out, s.Name+"="+v)
		}
	}
	return out
}

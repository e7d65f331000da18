// Package switches is the one place the module reads its environment
// variables: the switches that change how a back-end computes or what it
// records, without a flag or a Config field. Each has one definition here
// (its name, its values, what it does); the packages that act on one ask it
// for its value, and Set lists those set so that a server's config lines
// echo those that change how it computes (the config line "switches").
package switches

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// A Switch is one environment variable.
type Switch struct {
	// Name is the variable's name.
	Name string
	// Values are the values it takes besides unset; nil means any value (a
	// file path). Where Values holds "auto", unset means "auto".
	Values []string
	// Doc says what it does, in one sentence.
	Doc string
}

// The switches. Each package that reads one names it here and nowhere else.
var (
	GemmKernel = &Switch{Name: "INFERBENCH_GEMM_KERNEL", Values: []string{"generic", "avx2", "avx512"},
		Doc: "the CPU's matrix-product micro-kernel when gemm.Config.Kernel is empty (default: the fastest this CPU has)"}
	ConvWinograd = &Switch{Name: "INFERBENCH_CONV_WINOGRAD", Values: []string{"on", "off", "auto"},
		Doc: "whether the CPU back-end runs its 3x3 stride-1 convolutions with Winograd (auto: where its rule says)"}
	ConvWinogradTile = &Switch{Name: "INFERBENCH_CONV_WINOGRAD_TILE", Values: []string{"2", "4", "auto"},
		Doc: "the output tile of the CPU's Winograd convolutions: F(2x2,3x3) or F(4x4,3x3) (auto: by kernel family and channels)"}
	ConvOverlap = &Switch{Name: "INFERBENCH_CONV_OVERLAP", Values: []string{"on", "off", "auto"},
		Doc: "whether the steps of a CPU forward pass run as one job whose steps overlap (off: one job a step)"}
	CUDNNSearch = &Switch{Name: "INFERBENCH_CUDNN_SEARCH", Values: []string{"quick", "exhaustive"},
		Doc: "how the cuda back-end chooses convolution algorithms (default quick)"}
	CUDNNCache = &Switch{Name: "INFERBENCH_CUDNN_CACHE",
		Doc: "the cuda back-end's algorithm cache file when backend.Options.AlgoCache is empty, or off"}
	CUDAStem = &Switch{Name: "INFERBENCH_CUDA_STEM", Values: []string{"plain", "s2d"},
		Doc: "the form of the cuda back-end's stem convolution (default s2d for fp16, plain otherwise)"}
	CUDATimeline = &Switch{Name: "INFERBENCH_CUDA_TIMELINE",
		Doc: "a file the cuda back-end writes the timeline of its start-up to"}
)

// All lists every switch.
var All = []*Switch{GemmKernel, ConvWinograd, ConvWinogradTile, ConvOverlap, CUDNNSearch, CUDNNCache, CUDAStem, CUDATimeline}

// Value is the variable's value as set, "" when unset.
func (s *Switch) Value() string { return os.Getenv(s.Name) }

// Choice is the variable's value checked against Values: "auto" where it
// is unset and Values holds "auto", "" where it is unset otherwise, and an
// error naming the variable and its values for anything else.
func (s *Switch) Choice() (string, error) {
	v := s.Value()
	switch {
	case v == "" && slices.Contains(s.Values, "auto"):
		return "auto", nil
	case v == "" || s.Values == nil || slices.Contains(s.Values, v):
		return v, nil
	}
	return "", fmt.Errorf("%s=%q: want %s", s.Name, v, strings.Join(s.Values, ", "))
}

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

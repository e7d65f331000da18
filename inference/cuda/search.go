package cuda

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/internal/switches"
)

// switches.CUDNNSearch (INFERBENCH_CUDNN_SEARCH) sets how Open chooses the
// algorithm of a convolution problem the algorithm cache does not hold:
//
//   - quick (the default, also when unset): ask cuDNN's heuristics
//     (cudnnGetConvolutionForwardAlgorithm_v7) for their ranking and time
//     only their first quickTopK algorithms that fit the workspace (for FP16,
//     those with tensor-op math), plus the implicit precomputed GEMM
//     algorithm when it is not among them, each as the call the forward pass
//     makes;
//   - exhaustive: time every algorithm with
//     cudnnFindConvolutionForwardAlgorithmEx, then its first quickTopK that
//     fit the workspace, plus the implicit precomputed GEMM algorithm, each as
//     the call the forward pass makes (Find times a plain convolution, and its
//     fastest can be slow fused: see timedTopK).
//
// The two keep apart entries in the algorithm cache. The config line
// cudnn-search says which one ran.

// quickTopK is how many of the heuristics' algorithms the quick search times,
// and quickReps how many calls one timing averages (after one untimed call).
const (
	quickTopK = 3
	quickReps = 5
)

// search is how prepare chooses an algorithm: quick (the zero value) or
// exhaustive.
type search struct {
	exhaustive bool
	bad        string // a value of switches.CUDNNSearch that was not understood
}

// searchFromEnv reads switches.CUDNNSearch; a value other than quick or exhaustive gives
// the quick search, which String then mentions.
func searchFromEnv() search {
	switch v := switches.CUDNNSearch.Value(); v {
	case "", "quick":
		return search{}
	case "exhaustive":
		return search{exhaustive: true}
	default:
		return search{bad: v}
	}
}

// String is the config line cudnn-search.
func (s search) String() string {
	if s.exhaustive {
		return fmt.Sprintf("exhaustive (cudnnFindConvolutionForwardAlgorithmEx, its first %d timed as called)", quickTopK)
	}
	v := fmt.Sprintf("quick (heuristics' first %d timed)", quickTopK)
	if s.bad != "" {
		v += fmt.Sprintf("; %s=%q not understood", switches.CUDNNSearch.Name, s.bad)
	}
	return v
}

// keyPart is the search's part of algorithm cache keys. The exhaustive
// search's choices before it timed Find's best as called are not reused.
func (s search) keyPart() string {
	if s.exhaustive {
		return "exhaustive-as-called|"
	}
	return "quick|"
}

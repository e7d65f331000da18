package cuda

import (
	"slices"

	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
)

// timedTopK is what a search times of res, a ranking of algorithms for one
// convolution (the heuristics' order, or Find's fastest first): in that
// order, the first k distinct algorithms (with their math type) that ran and
// need at most limit bytes of workspace, then the implicit precomputed GEMM
// algorithm if it was not among them and is usable (the one a convolution
// without ReLU fuses with).
//
// Both searches time these as the forward pass calls them. Find's own times
// are of a plain convolution, and its fastest can be far slower fused with
// the bias and ReLU.
func timedTopK(res []cudnn.AlgoPerf, limit uintptr, k int) []cudnn.AlgoPerf {
	var out []cudnn.AlgoPerf
	gemm := false
	for _, r := range res {
		if r.Err != nil || r.Memory > limit ||
			(len(out) >= k && (gemm || r.Algo != cudnn.AlgoImplicitPrecompGEMM)) ||
			slices.ContainsFunc(out, func(o cudnn.AlgoPerf) bool { return o.Algo == r.Algo && o.MathType == r.MathType }) {
			continue
		}
		out = append(out, r)
		gemm = gemm || r.Algo == cudnn.AlgoImplicitPrecompGEMM
	}
	return out
}

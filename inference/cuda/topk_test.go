package cuda

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
)

func TestTimedTopK(t *testing.T) {
	const tensor, plain = cudnn.TensorOpMath, cudnn.DefaultMath
	res := []cudnn.AlgoPerf{
		{Algo: cudnn.AlgoWinogradNonfused, MathType: tensor, Memory: 10},
		{Algo: cudnn.AlgoFFT, MathType: tensor, Memory: 1 << 30},            // too much workspace
		{Algo: cudnn.AlgoWinograd, MathType: tensor, Err: errors.New("no")}, // did not run
		{Algo: cudnn.AlgoWinogradNonfused, MathType: tensor, Memory: 10},    // seen
		{Algo: cudnn.AlgoWinogradNonfused, MathType: plain, Memory: 10},     // another math type
		{Algo: cudnn.AlgoFFTTiling, MathType: tensor, Memory: 20},
		{Algo: cudnn.AlgoDirect, MathType: tensor, Memory: 0},               // past k
		{Algo: cudnn.AlgoImplicitPrecompGEMM, MathType: tensor, Memory: 30}, // added after k
		{Algo: cudnn.AlgoImplicitPrecompGEMM, MathType: plain, Memory: 30},  // GEMM is there
	}
	got := timedTopK(res, 1000, 3)
	var algos []cudnn.ConvFwdAlgo
	var maths []cudnn.MathType
	for _, r := range got {
		algos = append(algos, r.Algo)
		maths = append(maths, r.MathType)
	}
	assert.Equal(t, []cudnn.ConvFwdAlgo{cudnn.AlgoWinogradNonfused, cudnn.AlgoWinogradNonfused, cudnn.AlgoFFTTiling, cudnn.AlgoImplicitPrecompGEMM}, algos)
	assert.Equal(t, []cudnn.MathType{tensor, plain, tensor, tensor}, maths)

	// GEMM among the first k is not added again; the workspace limit
	// applies to every one; nothing usable is nothing.
	assert.Len(t, timedTopK(res[7:], 1000, 1), 1)
	got = timedTopK(res, 5, 3)
	assert.Len(t, got, 1)
	assert.Equal(t, cudnn.AlgoDirect, got[0].Algo)
	assert.Empty(t, timedTopK(res[:3], 5, 3))
}

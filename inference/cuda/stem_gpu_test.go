//go:build cuda && linux && cgo

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// TestPaddedStemAgrees checks the padded stem (PadStemEnv) against the plain
// one: for TF32 and FP16 (the NHWC precisions), with and without CUDA graphs,
// float32 and uint8 input, the logits agree within the precision's tolerance
// with top-1 agreement of at least 99 %, and the engine says it padded.
func TestPaddedStemAgrees(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 7)
	require.NoError(t, err)
	const n, side = 16, 250
	x := randomInput(n, side, side, 17)
	for _, prec := range []backend.Precision{backend.TF32, backend.FP16} {
		for _, graphs := range []bool{false, true} {
			t.Run(prec.String()+map[bool]string{false: "", true: "/graphs"}[graphs], func(t *testing.T) {
				open := func(pad string) backend.Engine {
					t.Setenv(PadStemEnv, pad)
					e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: n, Height: side, Width: side,
						Precision: prec, Graphs: graphs, Batches: []int{n}, AlgoCache: "off"})
					require.NoError(t, err)
					t.Cleanup(func() { e.Close() })
					return e
				}
				plain, padded := open("0"), open("1")
				assert.Empty(t, configValue(plain.Info().Config, "cuda-stem"))
				assert.Contains(t, configValue(padded.Info().Config, "cuda-stem"), "padded to")
				want := run(t, plain, [][]float32{x}, n)
				got := run(t, padded, [][]float32{x}, n)
				// uint8 input goes through the other padded kernel: its
				// logits must be those of the plain stem too.
				u := randomBytes(n, side, side, 19)
				want = append(want, runUint8(t, plain, u, n)...)
				got = append(got, runUint8(t, padded, u, n)...)
				rel, scale, agree := agreement(got, want, m.Arch.Classes)
				t.Logf("padded vs plain stem, %s, graphs %v: top-1 %d/%d (float32 then uint8 input), max abs error %.3g = %.3g x max|logit|", prec, graphs, agree, 2*n, rel*scale, rel)
				assert.GreaterOrEqual(t, float64(agree)/(2*n), 0.99, "top-1 agreement")
				assert.LessOrEqual(t, rel, tolerance(prec), "relative error")
			})
		}
	}
}

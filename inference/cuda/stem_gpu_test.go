//go:build cuda && linux && cgo

package cuda

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// useStem has the engines this test opens ask for the stem form f.
func useStem(t *testing.T, f stemForm) {
	t.Cleanup(func() { askStem = defaultStem })
	askStem = func(backend.Precision) stemForm { return f }
}

// TestS2DStemAgrees checks the space-to-depth stem (s2d) against the
// plain one: for TF32 and FP16 (the NHWC precisions), with and without CUDA
// graphs, and with graph-API convolutions, float32 and uint8 input, the
// logits agree within the precision's tolerance with top-1 agreement of at
// least 99 %, and the engines' cuda-stem lines say which stem ran.
func TestS2DStemAgrees(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 7)
	require.NoError(t, err)
	const n, side = 16, 250
	x := randomInput(n, side, side, 17)
	u := randomBytes(n, side, side, 19)
	for _, tc := range []struct {
		prec   backend.Precision
		graphs bool
		convs  backend.Convs
	}{
		{backend.TF32, false, backend.ConvsLegacy},
		{backend.TF32, true, backend.ConvsLegacy},
		{backend.FP16, false, backend.ConvsLegacy},
		{backend.FP16, true, backend.ConvsLegacy},
		{backend.FP16, true, backend.ConvsGraph},
	} {
		t.Run(fmt.Sprintf("%s/graphs=%v/convs=%s", tc.prec, tc.graphs, tc.convs), func(t *testing.T) {
			open := func(stem stemForm) backend.Engine {
				useStem(t, stem)
				e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: n, Height: side, Width: side,
					Precision: tc.prec, Graphs: tc.graphs, Convs: tc.convs, Batches: []int{n}, AlgoCache: "off"})
				require.NoError(t, err)
				t.Cleanup(func() { e.Close() })
				return e
			}
			plain, s2d := open(stemPlain), open(stemS2D)
			assert.Equal(t, "plain: 3x250x250 7x7/2", configValue(plain.Info().Config, "cuda-stem"))
			assert.Equal(t, "s2d: 16x128x128 4x4/1 (the space-to-depth form of 3x250x250 7x7/2)", configValue(s2d.Info().Config, "cuda-stem"))
			var want, got []float32
			for _, in := range []struct {
				name string
				run  func(e backend.Engine) []float32
			}{
				{"float32", func(e backend.Engine) []float32 { return run(t, e, [][]float32{x}, n) }},
				{"uint8", func(e backend.Engine) []float32 { return runUint8(t, e, u, n) }},
			} {
				w, g := in.run(plain), in.run(s2d)
				rel, scale, agree := agreement(g, w, m.Arch.Classes)
				t.Logf("s2d vs plain stem, %s input: top-1 %d/%d, max abs error %.3g = %.3g x max|logit|", in.name, agree, n, rel*scale, rel)
				want, got = append(want, w...), append(got, g...)
			}
			rel, _, agree := agreement(got, want, m.Arch.Classes)
			assert.GreaterOrEqual(t, float64(agree)/(2*n), 0.99, "top-1 agreement")
			assert.LessOrEqual(t, rel, tolerance(tc.prec), "relative error")
		})
	}
}

// TestS2DInputKernelBits checks the space-to-depth input kernels value by
// value on an odd-sized image (41 x 36): the device's input is the host's
// spaceToDepth of the host-normalised image (uint8) or of the image itself
// (float32), rounded to half for FP16, zeros in the padding and the four
// spare channels.
func TestS2DInputKernelBits(t *testing.T) {
	requireGPU(t)
	useStem(t, stemS2D)
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(t, err)
	const n, h, wd = 3, 41, 36
	norm := backend.Normalization{Mean: []float32{0.5, 0.25, 0.125}, Std: []float32{0.3, 0.7, 0.11}}
	x := randomBytes(n, h, wd, 5)
	f := hostNormalised(x, norm, h, wd)
	for _, prec := range []backend.Precision{backend.TF32, backend.FP16} {
		for _, uint8In := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/uint8=%v", prec, uint8In), func(t *testing.T) {
				e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: n, Height: h, Width: wd,
					Precision: prec, Normalization: norm})
				require.NoError(t, err)
				defer e.Close()
				eng := e.(*engine)
				require.Equal(t, stemS2D, eng.net.stem)
				s := eng.net.convs[0]
				assert.Equal(t, [3]int{16, 24, 21}, [3]int{s.in, s.inH, s.inW}, "space-to-depth input per image")
				want := spaceToDepth(f, n, h, wd, eng.net.stemPad, s.inH, s.inW)
				got := convertOnDevice(t, eng.workers[0], x, f, uint8In, n)
				mismatches := 0
				for i, v := range want {
					if !got.is(i, v) {
						mismatches++
					}
				}
				assert.Zero(t, mismatches, "values differing from the host's of %d", len(want))
			})
		}
	}
}

package conv

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/internal/cpu/gemm"
)

// BenchmarkLayer measures ResNet-18's convolution shapes at 250x250.
func BenchmarkLayer(b *testing.B) {
	cases := []struct {
		name        string
		in          Layout
		out, k      int
		stride, pad int
	}{
		{"stem", Layout{H: 250, W: 250, C: 3, Pitch: 3, Pad: 3}, 64, 7, 2, 3},
		{"stage1", Layout{H: 63, W: 63, C: 64, Pitch: 64, Pad: 1}, 64, 3, 1, 1},
		{"stage2-down", Layout{H: 63, W: 63, C: 64, Pitch: 64, Pad: 1}, 128, 3, 2, 1},
		{"stage2", Layout{H: 32, W: 32, C: 128, Pitch: 128, Pad: 1}, 128, 3, 1, 1},
		{"stage3", Layout{H: 16, W: 16, C: 256, Pitch: 256, Pad: 1}, 256, 3, 1, 1},
		{"stage4", Layout{H: 8, W: 8, C: 512, Pitch: 512, Pad: 1}, 512, 3, 1, 1},
		{"stage4-1x1", Layout{H: 16, W: 16, C: 256, Pitch: 256, Pad: 1}, 512, 1, 2, 0},
	}
	for _, kern := range Kernels() {
		if kern == "generic" {
			continue
		}
		for _, batch := range []int{1, 8} {
			for _, tc := range cases {
				for _, tile := range []int{0, 2, 4} {
					algo := "direct"
					if tile != 0 {
						algo = fmt.Sprintf("winograd%dx%d", tile, tile)
						if tc.k != 3 || tc.stride != 1 {
							continue
						}
					}
					b.Run(fmt.Sprintf("kernel=%s/batch=%d/layer=%s/algo=%s", kern, batch, tc.name, algo), func(b *testing.B) {
						ctx, err := gemm.New(gemm.Config{})
						require.NoError(b, err)
						defer ctx.Close()
						rng := rand.New(rand.NewPCG(1, 1))
						l, err := newLayer(Spec{In: tc.in, Out: tc.out, K: tc.k, Stride: tc.stride, Pad: tc.pad, OutPad: 1,
							Weight: randSlice(rng, tc.out*tc.in.C*tc.k*tc.k), Bias: randSlice(rng, tc.out), ReLU: true, Kernel: kern}, tile)
						require.NoError(b, err)
						x, _ := randTensor(rng, batch, tc.in)
						y := make([]float32, l.Out().Size(batch))
						r := NewRunner(ctx)
						for b.Loop() {
							if err := r.Run(l, batch, x, y, nil); err != nil {
								b.Fatal(err)
							}
						}
						b.ReportMetric(float64(l.flops()*batch)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					})
				}
			}
		}
	}
}

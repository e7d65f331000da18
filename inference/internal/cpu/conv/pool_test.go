package conv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMaxPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, ctx := range contexts(t) {
		r := NewRunner(ctx)
		for _, tc := range []struct {
			h, w, c, pitch, pad, outPad int
		}{
			{1, 1, 3, 16, 1, 1}, {2, 3, 16, 16, 1, 0}, {5, 4, 5, 16, 2, 1}, {7, 7, 64, 64, 1, 1}, {33, 64, 16, 16, 1, 1},
		} {
			t.Run(fmt.Sprintf("threads=%d/h=%d/w=%d/c=%d", ctx.Threads(), tc.h, tc.w, tc.c), func(t *testing.T) {
				const n = 2
				in := Layout{H: tc.h, W: tc.w, C: tc.c, Pitch: tc.pitch, Pad: tc.pad}
				x, xNCHW := randTensor(rng, n, in)
				for i := range x {
					x[i] = float32(math.Abs(float64(x[i]))) // the pool follows a ReLU
				}
				for i := range xNCHW {
					xNCHW[i] = float32(math.Abs(float64(xNCHW[i])))
				}
				p, err := NewMaxPool(in, tc.outPad)
				require.NoError(t, err)
				ol := p.Out()
				got := nans(ol.Size(n))
				require.NoError(t, r.Pool(p, n, x, got))
				for i := 0; i < n; i++ {
					for oy := -ol.Pad; oy < ol.H+ol.Pad; oy++ {
						for ox := -ol.Pad; ox < ol.W+ol.Pad; ox++ {
							for c := 0; c < ol.Pitch; c++ {
								var want float32
								if oy >= 0 && oy < ol.H && ox >= 0 && ox < ol.W && c < ol.C {
									want = float32(math.Inf(-1))
									for y := max(2*oy-1, 0); y <= min(2*oy+1, in.H-1); y++ {
										for xx := max(2*ox-1, 0); xx <= min(2*ox+1, in.W-1); xx++ {
											want = max(want, xNCHW[((i*in.C+c)*in.H+y)*in.W+xx])
										}
									}
								}
								require.Equal(t, want, got[ol.Offset(i, oy, ox)+c], "image %d (%d, %d) channel %d", i, oy, ox, c)
							}
						}
					}
				}
			})
		}
	}
	_, err := NewMaxPool(Layout{H: 4, W: 4, C: 1, Pitch: 1}, 0)
	assert.ErrorContains(t, err, "conv: max-pool")
}

func TestMax9(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{1, 7, 8, 9, 16, 67} {
		pix, row := n+3, 3*n+11
		src := randSlice(rng, 2*row+2*pix+n)
		got, want := make([]float32, n), make([]float32, n)
		max9(got, src, pix, row)
		max9Go(want, src, pix, row)
		assert.Equal(t, want, got, "n=%d", n)
		for i := range want {
			m := float32(math.Inf(-1))
			for ky := 0; ky < 3; ky++ {
				for kx := 0; kx < 3; kx++ {
					m = max(m, src[ky*row+kx*pix+i])
				}
			}
			require.Equal(t, m, want[i], "n=%d, value %d", n, i)
		}
	}
	assert.Panics(t, func() { max9(make([]float32, 8), make([]float32, 8), 1, 1) }, "short source")
}

func TestInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, ctx := range contexts(t) {
		r := NewRunner(ctx)
		// Pitch 3 is the stem's own layout (a loop of its own), 4 and 8
		// the general one with padding channels.
		for _, l := range []Layout{{H: 5, W: 7, C: 3, Pitch: 4, Pad: 3}, {H: 5, W: 7, C: 3, Pitch: 3, Pad: 3}, {H: 4, W: 6, C: 3, Pitch: 8, Pad: 1}} {
			x, xNCHW := randTensor(rng, 3, l)
			per := l.C * l.H * l.W
			imgs := [][]float32{xNCHW[:per], xNCHW[per : 2*per], xNCHW[2*per:]}
			got := randSlice(rng, l.Size(3)) // garbage in the padding must go
			require.NoError(t, r.Input(l, imgs, got))
			assert.Equal(t, x, got, "pitch %d", l.Pitch)
			assert.ErrorContains(t, r.Input(l, imgs, got[:10]), "conv: output has")
			assert.ErrorContains(t, r.Input(l, [][]float32{xNCHW[:5]}, got), "conv: image 0 has 5 values")
		}
	}
}

func TestMean(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, ctx := range contexts(t) {
		r := NewRunner(ctx)
		for _, tc := range []struct {
			n int
			l Layout
		}{
			{1, Layout{H: 1, W: 1, C: 5, Pitch: 16, Pad: 0}},
			{3, Layout{H: 4, W: 3, C: 70, Pitch: 80, Pad: 1}},
			{2, Layout{H: 8, W: 8, C: 512, Pitch: 512, Pad: 1}},
			{1, Layout{H: 2, W: 3, C: 1100, Pitch: 1104, Pad: 1}}, // runs of 512 channels
		} {
			t.Run(fmt.Sprintf("threads=%d/n=%d/c=%d", ctx.Threads(), tc.n, tc.l.C), func(t *testing.T) {
				x, xNCHW := randTensor(rng, tc.n, tc.l)
				feat := nans(tc.l.C * tc.n)
				require.NoError(t, r.Mean(tc.l, tc.n, x, feat))
				plane := tc.l.H * tc.l.W
				for i := 0; i < tc.n; i++ {
					for c := 0; c < tc.l.C; c++ {
						var want float64
						for _, v := range xNCHW[(i*tc.l.C+c)*plane:][:plane] {
							want += float64(v)
						}
						want /= float64(plane)
						assert.InDelta(t, want, feat[c*tc.n+i], 1e-5, "image %d channel %d", i, c)
					}
				}
			})
		}
		assert.ErrorContains(t, r.Mean(Layout{H: 2, W: 2, C: 4, Pitch: 16}, 1, make([]float32, 10), make([]float32, 4)), "conv: input has")
		assert.ErrorContains(t, r.Mean(Layout{H: 2, W: 2, C: 4, Pitch: 16}, 1, make([]float32, 64), make([]float32, 3)), "conv: features have")
	}
}

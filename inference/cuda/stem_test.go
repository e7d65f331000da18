package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

func TestChooseStem(t *testing.T) {
	for _, tc := range []struct {
		name   string
		asked  stemForm
		prec   backend.Precision
		kernel bool
		want   stemForm
	}{
		{"plain", stemPlain, backend.FP16, true, stemPlain},
		{"s2d fp16", stemS2D, backend.FP16, true, stemS2D},
		{"s2d tf32", stemS2D, backend.TF32, true, stemS2D},
		{"s2d fp32", stemS2D, backend.FP32, true, stemPlain},
		{"s2d without the input kernel", stemS2D, backend.FP16, false, stemPlain},
		{"the default for fp16", defaultStem(backend.FP16), backend.FP16, true, stemS2D},
		{"the default for tf32", defaultStem(backend.TF32), backend.TF32, true, stemPlain},
		{"the default for fp32", defaultStem(backend.FP32), backend.FP32, true, stemPlain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := chooseStem(tc.asked, tc.prec, tc.kernel)
			assert.Equal(t, tc.want, got, "chooseStem(%s, %s, %v)", tc.asked, tc.prec, tc.kernel)
		})
	}
}

// spaceToDepth is the host's space-to-depth input (stem.go) of n NCHW
// images x of 3 x h x w, for a stem of padding pad: NHWC, rows x cols
// pixels of s2dChannels values. The s2d input kernels write the same.
func spaceToDepth(x []float32, n, h, w, pad, rows, cols int) []float32 {
	s := make([]float32, n*rows*cols*s2dChannels)
	for img := range n {
		for y := range rows {
			for xx := range cols {
				px := s[((img*rows+y)*cols+xx)*s2dChannels:]
				for dy := range 2 {
					for dx := range 2 {
						r, c := 2*y+dy-pad, 2*xx+dx-pad
						if r < 0 || r >= h || c < 0 || c >= w {
							continue
						}
						for ch := range 3 {
							px[(dy*2+dx)*3+ch] = x[((img*3+ch)*h+r)*w+c]
						}
					}
				}
			}
		}
	}
	return s
}

// convRef is the convolution c (OIHW weights, plus bias) of n NCHW images x
// of c.In x h x w, in float64: NCHW output, and its height and width.
func convRef(x []float64, n, h, w int, c *resnet.FoldedConv) (y []float64, oh, ow int) {
	oh, ow = c.OutSize(h), c.OutSize(w)
	y = make([]float64, n*c.Out*oh*ow)
	for img := range n {
		for o := range c.Out {
			for oy := range oh {
				for ox := range ow {
					sum := float64(c.Bias[o])
					for i := range c.In {
						for ky := range c.K {
							r := oy*c.Stride + ky - c.Pad
							if r < 0 || r >= h {
								continue
							}
							for kx := range c.K {
								col := ox*c.Stride + kx - c.Pad
								if col < 0 || col >= w {
									continue
								}
								sum += float64(c.Weight[((o*c.In+i)*c.K+ky)*c.K+kx]) * x[((img*c.In+i)*h+r)*w+col]
							}
						}
					}
					y[((img*c.Out+o)*oh+oy)*ow+ox] = sum
				}
			}
		}
	}
	return y, oh, ow
}

// nchw64 is the NHWC tensor x (n x h x w pixels of c values) in NCHW, widened.
func nchw64(x []float32, n, h, w, c int) []float64 {
	y := make([]float64, len(x))
	for img := range n {
		for p := range h * w {
			for ch := range c {
				y[(img*c+ch)*h*w+p] = float64(x[(img*h*w+p)*c+ch])
			}
		}
	}
	return y
}

// randomStem is a stride-2 convolution of out x 3 x k x k random weights and
// biases.
func randomStem(rng *rand.Rand, out, k, pad int) *resnet.FoldedConv {
	c := &resnet.FoldedConv{Out: out, In: 3, K: k, Stride: 2, Pad: pad}
	c.Weight = make([]float32, out*3*k*k)
	for i := range c.Weight {
		c.Weight[i] = float32(rng.NormFloat64())
	}
	c.Bias = make([]float32, out)
	for i := range c.Bias {
		c.Bias[i] = float32(rng.NormFloat64())
	}
	return c
}

// TestS2DStemMatchesDirect checks the space-to-depth rewrite on the host: the
// input transform, the weight transform and the stride-1 convolution give
// the direct stride-2 convolution's output, for ResNet's 7x7/2 stem and other
// filters, on odd and even image sizes (ResNet's 250 among them), with
// random images, weights and biases.
func TestS2DStemMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 3))
	type filter struct{ k, pad int }
	for _, f := range []filter{{7, 3}, {3, 1}, {5, 2}, {4, 1}, {7, 0}, {2, 0}} {
		for _, size := range [][2]int{{1, 1}, {2, 3}, {7, 7}, {9, 10}, {16, 13}, {33, 30}} {
			h, w := size[0], size[1]
			if h+2*f.pad < f.k || w+2*f.pad < f.k {
				continue // no output
			}
			t.Run(fmt.Sprintf("k=%d/pad=%d/%dx%d", f.k, f.pad, h, w), func(t *testing.T) {
				checkS2D(t, rng, 2, 5, f.k, f.pad, h, w)
			})
		}
	}
	t.Run("resnet stem/250x250", func(t *testing.T) { checkS2D(t, rng, 1, 4, 7, 3, 250, 250) })
	t.Run("resnet stem/251x249", func(t *testing.T) { checkS2D(t, rng, 1, 2, 7, 3, 251, 249) })
}

// checkS2D compares, for n random h x w images and a random stem of out
// channels, k x k taps and padding pad, the space-to-depth form with the
// direct convolution.
func checkS2D(t *testing.T, rng *rand.Rand, n, out, k, pad, h, w int) {
	t.Helper()
	c := randomStem(rng, out, k, pad)
	x := make([]float32, n*3*h*w)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	x64 := make([]float64, len(x))
	for i, v := range x {
		x64[i] = float64(v)
	}
	want, oh, ow := convRef(x64, n, h, w, c)

	s, rows, cols, err := s2dStem(c, h, w)
	require.NoError(t, err)
	assert.Equal(t, s2dChannels, s.In)
	assert.Equal(t, (k+1)/2, s.K)
	assert.Equal(t, 1, s.Stride)
	assert.Equal(t, 0, s.Pad)
	assert.Equal(t, oh, s.OutSize(rows), "output rows")
	assert.Equal(t, ow, s.OutSize(cols), "output columns")
	got, gh, gw := convRef(nchw64(spaceToDepth(x, n, h, w, pad, rows, cols), n, rows, cols, s2dChannels), n, rows, cols, s)
	require.Equal(t, [2]int{oh, ow}, [2]int{gh, gw}, "output size")
	var maxDiff, scale float64
	for i := range want {
		maxDiff = max(maxDiff, math.Abs(got[i]-want[i]))
		scale = max(scale, math.Abs(want[i]))
	}
	// The same products summed in another order.
	assert.LessOrEqual(t, maxDiff, 1e-12*max(scale, 1), "max |s2d - direct| over %d outputs", len(want))
	assert.Len(t, c.Weight, out*3*k*k, "the original is untouched")
}

// TestS2DStemGeometry checks the space-to-depth input's size for ResNet's
// stem and a weight's place in the rewritten filter.
func TestS2DStemGeometry(t *testing.T) {
	for _, tc := range []struct{ h, rows, out int }{
		{250, 128, 125}, {251, 129, 126}, {224, 115, 112}, {64, 35, 32}, {1, 4, 1},
	} {
		c := randomStem(rand.New(rand.NewPCG(1, 1)), 1, 7, 3)
		s, rows, cols, err := s2dStem(c, tc.h, tc.h)
		require.NoError(t, err)
		assert.Equal(t, [2]int{tc.rows, tc.rows}, [2]int{rows, cols}, "s2dStem(7x7/2, %d): input size", tc.h)
		assert.Equal(t, tc.out, s.OutSize(rows), "s2dStem(7x7/2, %d): output size", tc.h)
	}
	c := randomStem(rand.New(rand.NewPCG(2, 2)), 2, 7, 3)
	s, _, _, err := s2dStem(c, 250, 250)
	require.NoError(t, err)
	// W'[o][c][KY][KX] = W[o][ch][2KY+dy][2KX+dx], c = (dy*2+dx)*3+ch.
	const o, ch, ky, kx = 1, 2, 5, 2 // dy = 1, dx = 0: KY = 2, KX = 1
	assert.Equal(t, c.Weight[((o*3+ch)*7+ky)*7+kx], s.Weight[((o*16+(2*1+0)*3+ch)*4+2)*4+1])
	for i := range s2dChannels {
		for kyy := range 4 {
			for kxx := range 4 {
				v := s.Weight[((o*16+i)*4+kyy)*4+kxx]
				dy, dx := (i/3)/2, (i/3)%2
				if i >= 12 || 2*kyy+dy >= 7 || 2*kxx+dx >= 7 {
					assert.Zero(t, v, "channel %d tap %d,%d", i, kyy, kxx)
				}
			}
		}
	}
	assert.Equal(t, c.Bias, s.Bias)

	for _, bad := range []*resnet.FoldedConv{
		{Out: 1, In: 3, K: 3, Stride: 1, Pad: 1},
		{Out: 1, In: 4, K: 7, Stride: 2, Pad: 3},
	} {
		_, _, _, err := s2dStem(bad, 32, 32)
		assert.Error(t, err, "s2dStem(%+v)", *bad)
	}
	_, _, _, err = s2dStem(&resnet.FoldedConv{Out: 1, In: 3, K: 7, Stride: 2, Pad: 0}, 3, 3)
	assert.Error(t, err, "no output")
}

// TestOHWI checks the reordering of OIHW weights to NHWC filters.
func TestOHWI(t *testing.T) {
	c := &resnet.FoldedConv{Out: 2, In: 3, K: 2, Stride: 1}
	for i := range 2 * 3 * 4 {
		c.Weight = append(c.Weight, float32(i+1))
	}
	w := ohwi(c)
	for o := range 2 {
		for k := range 4 {
			for i := range 3 {
				assert.Equal(t, c.Weight[(o*3+i)*4+k], w[(o*4+k)*3+i], "o=%d k=%d i=%d", o, k, i)
			}
		}
	}
}

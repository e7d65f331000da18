package cuda

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// The stem convolution, torchvision's 7x7 stride-2 over the image's 3
// channels, can run in two forms:
//
//  1. plain: as it is, over the input kernel's NHWC (or NCHW) image. Its 3
//     channels keep cuDNN from its tensor-core kernels, so in fp16 the stem
//     takes a large share of the pass.
//  2. s2d: as a stride-1 convolution over the image's space-to-depth form.
//     Let P be the normalised image zero-padded by the stem's pad on top and
//     left (P[i][j] = img[i-pad][j-pad], 0 outside the image, so the zeros
//     are the convolution's padding, after normalisation). The input kernel
//     writes S[Y][X][c] = P[ch][2Y+dy][2X+dx] for c = (dy*2+dx)*3 + ch < 12,
//     and 0 for channels 12 to 15 (s2dChannels): a pixel is 32 bytes in
//     half. The stem's weights become W'[o][c][KY][KX] =
//     W[o][ch][2KY+dy][2KX+dx] where 2KY+dy and 2KX+dx are taps of the K x K
//     filter, else 0, with ceil(K/2) x ceil(K/2) taps, stride 1 and no
//     padding: output row y sums W[k] P[2y+k] over k < 2*ceil(K/2), the
//     plain convolution's sum with zero weights for k >= K. For the output's
//     Ho = (H+2*pad-K)/2 + 1 rows, S has Ho + ceil(K/2) - 1 rows (128 for
//     250: Ho 125, 4 taps); rows past the image read zeros. Bias and ReLU
//     are the plain stem's.
//
// s2d does 16*16/(3*49) = 1.7 times the plain stem's multiply-adds (zero
// channels and taps), which tensor cores can do in less time.

// The stem is s2d for FP16 and plain otherwise (defaultStem). s2d needs an
// NHWC precision (TF32 or FP16) and float32 input converted by this
// package's kernel (not cudnnTransformTensor, which cannot write S); where
// it lacks them the stem is plain. The engine's config line cuda-stem says
// which form runs.

// stemForm is the form the stem convolution runs in.
type stemForm int

const (
	stemPlain stemForm = iota
	stemS2D
)

func (f stemForm) String() string {
	if f == stemS2D {
		return "s2d"
	}
	return "plain"
}

// defaultStem is the stem's form engines ask for: s2d for FP16, where it
// was measured faster, and plain for FP32 and for TF32, whose s2d stem
// agrees with the plain one but has not been timed.
func defaultStem(p backend.Precision) stemForm {
	if p == backend.FP16 {
		return stemS2D
	}
	return stemPlain
}

// askStem is the form an engine asks for, defaultStem but in this package's
// tests, which set it to run both forms.
var askStem = defaultStem

// chooseStem returns the stem's form for a network of precision p whose
// float32 input is converted by this package's kernel when kernel is set:
// the form asked for where it can run, else plain.
func chooseStem(asked stemForm, p backend.Precision, kernel bool) stemForm {
	if asked == stemS2D && p != backend.FP32 && kernel {
		return stemS2D
	}
	return stemPlain
}

// s2dChannels is the channels a pixel of the space-to-depth input has: the
// 3 channels of 2x2 image pixels, then 4 zeros.
const s2dChannels = 16

// s2dTaps is the filter size of the space-to-depth form of a k x k stride-2
// convolution: ceil(k/2).
func s2dTaps(k int) int { return (k + 1) / 2 }

// s2dStem returns c, a stride-2 convolution over 3 channels (OIHW weights),
// as the stride-1 convolution over the space-to-depth input (see above),
// and that input's height and width for h x w images. Its output is c's, of
// the same size; c is untouched.
func s2dStem(c *resnet.FoldedConv, h, w int) (s *resnet.FoldedConv, sh, sw int, err error) {
	if c.Stride != 2 || c.In != 3 {
		return nil, 0, 0, fmt.Errorf("space-to-depth stem of a %dx%d/%d convolution over %d channels: want stride 2 over 3", c.K, c.K, c.Stride, c.In)
	}
	oh, ow := c.OutSize(h), c.OutSize(w)
	if oh < 1 || ow < 1 {
		return nil, 0, 0, fmt.Errorf("space-to-depth stem of %dx%d images: no output", h, w)
	}
	taps := s2dTaps(c.K)
	s = &resnet.FoldedConv{Out: c.Out, In: s2dChannels, K: taps, Stride: 1, Pad: 0, Bias: c.Bias}
	s.Weight = make([]float32, c.Out*s2dChannels*taps*taps)
	for o := range c.Out {
		for dy := range 2 {
			for dx := range 2 {
				for ch := range 3 {
					in := (dy*2+dx)*3 + ch
					for ky := range taps {
						for kx := range taps {
							y, x := 2*ky+dy, 2*kx+dx
							if y >= c.K || x >= c.K {
								continue
							}
							s.Weight[((o*s2dChannels+in)*taps+ky)*taps+kx] = c.Weight[((o*3+ch)*c.K+y)*c.K+x]
						}
					}
				}
			}
		}
	}
	return s, oh + taps - 1, ow + taps - 1, nil
}

// ohwi reorders OIHW weights to OHWI, the layout of NHWC filters.
func ohwi(c *resnet.FoldedConv) []float32 {
	out := make([]float32, len(c.Weight))
	kk := c.K * c.K
	parallelFor(c.Out, max(1, (1<<16)/max(1, c.In*kk)), func(lo, hi int) {
		for o := lo; o < hi; o++ {
			for i := 0; i < c.In; i++ {
				for k := 0; k < kk; k++ {
					out[(o*kk+k)*c.In+i] = c.Weight[(o*c.In+i)*kk+k]
				}
			}
		}
	})
	return out
}

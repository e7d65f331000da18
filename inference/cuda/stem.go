package cuda

import "github.com/inferbench/inferbench/inference/resnet"

// PadStemEnv names the environment variable that, set to 1, pads the stem's
// input to 16 bytes of channels a pixel on the NHWC precisions: 8 half
// channels for FP16, 4 float ones for TF32, the channels after the image's
// zero, and so are the stem's weights for them. cuDNN's tensor-core kernels
// want channel counts of such multiples; with 3 channels the stem took 1.67
// of the 4.11 ms of a batch-256 fp16 pass on an H200 (results/nvidia-h200/
// profile-fp16.md). It is off by default until a GPU run has checked the
// padded stem's logits and speed.
const PadStemEnv = "INFERBENCH_CUDA_PAD_STEM"

// stemChannels is the channels a pixel of the stem's input has: 3, or, with
// pad on an NHWC network, 16 bytes of elemBytes-byte values.
func stemChannels(pad, nhwc bool, elemBytes int) int {
	if !pad || !nhwc {
		return 3
	}
	return 16 / elemBytes
}

// padInputChannels returns c with in input channels: its weights for the
// channels it had, zeros for the others (so a zero input channel adds
// nothing). in must be at least c.In.
func padInputChannels(c *resnet.FoldedConv, in int) *resnet.FoldedConv {
	if in == c.In {
		return c
	}
	p := *c
	p.In = in
	kk := c.K * c.K
	p.Weight = make([]float32, c.Out*in*kk)
	for o := 0; o < c.Out; o++ {
		copy(p.Weight[o*in*kk:], c.Weight[o*c.In*kk:(o+1)*c.In*kk])
	}
	return &p
}

// ohwi reorders OIHW weights to OHWI, the layout of NHWC filters.
func ohwi(c *resnet.FoldedConv) []float32 {
	out := make([]float32, len(c.Weight))
	kk := c.K * c.K
	for o := 0; o < c.Out; o++ {
		for i := 0; i < c.In; i++ {
			for k := 0; k < kk; k++ {
				out[(o*kk+k)*c.In+i] = c.Weight[(o*c.In+i)*kk+k]
			}
		}
	}
	return out
}

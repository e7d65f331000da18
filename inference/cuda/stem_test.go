package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/inferbench/inferbench/inference/resnet"
)

func TestStemChannels(t *testing.T) {
	for _, tc := range []struct {
		pad, nhwc bool
		elem      int
		want      int
	}{
		{false, true, 2, 3}, {true, false, 4, 3}, {true, true, 2, 8}, {true, true, 4, 4},
	} {
		assert.Equal(t, tc.want, stemChannels(tc.pad, tc.nhwc, tc.elem), "stemChannels(%v, %v, %d)", tc.pad, tc.nhwc, tc.elem)
	}
}

// TestPadInputChannels checks the padded weights in OIHW: each output
// channel keeps its weights for the 3 input channels, then zeros, and the
// OHWI reordering the NHWC network applies keeps them in place.
func TestPadInputChannels(t *testing.T) {
	c := &resnet.FoldedConv{Out: 2, In: 3, K: 2, Stride: 1, Pad: 0, Bias: []float32{1, 2}}
	for i := range 2 * 3 * 4 {
		c.Weight = append(c.Weight, float32(i+1))
	}
	p := padInputChannels(c, 8)
	assert.Equal(t, 8, p.In)
	assert.Equal(t, c.Bias, p.Bias)
	assert.Len(t, p.Weight, 2*8*4)
	for o := range 2 {
		for i := range 8 {
			for k := range 4 {
				want := float32(0)
				if i < 3 {
					want = c.Weight[(o*3+i)*4+k]
				}
				assert.Equal(t, want, p.Weight[(o*8+i)*4+k], "o=%d i=%d k=%d", o, i, k)
			}
		}
	}
	assert.Len(t, c.Weight, 2*3*4, "the original is untouched")
	assert.Same(t, c, padInputChannels(c, 3), "no padding, no copy")

	w := ohwi(p)
	for o := range 2 {
		for k := range 4 {
			for i := range 8 {
				assert.Equal(t, p.Weight[(o*8+i)*4+k], w[(o*4+k)*8+i])
			}
		}
	}
}

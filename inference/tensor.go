package inference

import (
	"fmt"
	"math"

	"github.com/inferbench/inferbench/inference/resnet"
)

// Tensor is a dense float32 tensor in row-major order. Inputs are [n, 3, H, W]
// (NCHW); logits are [n, classes].
type Tensor struct {
	Shape []int
	Data  []float32
}

// NewInput returns a zeroed input tensor of n images of DefaultChannels x h x w.
func NewInput(n, h, w int) Tensor {
	return Tensor{Shape: []int{n, DefaultChannels, h, w}, Data: make([]float32, n*DefaultChannels*h*w)}
}

// geometry is what a server accepts as input.
type geometry struct {
	channels, height, width int
	maxBatch                int
	rejectNonFinite         bool
}

// check returns an *InputError for an input the server cannot take (see
// InputError.Field for the order of the checks).
func (g *geometry) check(in *Tensor) error {
	if in.Shape == nil && in.Data == nil {
		return &InputError{Field: "input", Want: fmt.Sprintf("[n,%d,%d,%d] float32 tensor", g.channels, g.height, g.width), Got: "nil"}
	}
	if len(in.Shape) != 4 {
		return &InputError{Field: "rank", Want: fmt.Sprintf("4 ([n,%d,H,W])", g.channels), Got: fmt.Sprintf("%d (%v)", len(in.Shape), in.Shape)}
	}
	n, c, h, w := in.Shape[0], in.Shape[1], in.Shape[2], in.Shape[3]
	if c != g.channels {
		return &InputError{Field: "channels", Want: fmt.Sprint(g.channels), Got: fmt.Sprint(c)}
	}
	if h < resnet.MinSize || w < resnet.MinSize {
		return &InputError{Field: "height x width", Want: fmt.Sprintf("at least %dx%d (this server: %dx%d)", resnet.MinSize, resnet.MinSize, g.height, g.width), Got: fmt.Sprintf("%dx%d", h, w)}
	}
	if h != g.height {
		return &InputError{Field: "height", Want: fmt.Sprint(g.height), Got: fmt.Sprint(h)}
	}
	if w != g.width {
		return &InputError{Field: "width", Want: fmt.Sprint(g.width), Got: fmt.Sprint(w)}
	}
	if n < 1 || n > g.maxBatch {
		return &InputError{Field: "batch", Want: fmt.Sprintf("1..%d", g.maxBatch), Got: fmt.Sprint(n)}
	}
	if want := n * c * h * w; len(in.Data) != want {
		return &InputError{Field: "data", Want: fmt.Sprintf("%d values for shape %v", want, in.Shape), Got: fmt.Sprintf("%d values", len(in.Data))}
	}
	if g.rejectNonFinite {
		for i, v := range in.Data {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return &InputError{Field: "value", Want: "finite values", Got: fmt.Sprintf("%v at index %d", v, i)}
			}
		}
	}
	return nil
}

package inference

import (
	"fmt"
	"math"
)

// Tensor is a dense float32 tensor in row-major order. Inputs are [n, 3, H, W]
// (NCHW); logits are [n, classes].
type Tensor struct {
	Shape []int
	Data  []float32
}

// NewInput returns a zeroed input tensor of n images of 3 x h x w.
func NewInput(n, h, w int) Tensor {
	return Tensor{Shape: []int{n, 3, h, w}, Data: make([]float32, n*3*h*w)}
}

// validate checks in against the server's input geometry.
func (s *Server) validate(in *Tensor) error {
	if in.Shape == nil && in.Data == nil {
		return &InputError{Field: "input", Want: fmt.Sprintf("[n,3,%d,%d] float32 tensor", s.cfg.Height, s.cfg.Width), Got: "nil"}
	}
	if len(in.Shape) != 4 {
		return &InputError{Field: "rank", Want: "4 ([n,3,H,W])", Got: fmt.Sprintf("%d (%v)", len(in.Shape), in.Shape)}
	}
	n, c, h, w := in.Shape[0], in.Shape[1], in.Shape[2], in.Shape[3]
	if c != s.channels {
		return &InputError{Field: "channels", Want: fmt.Sprint(s.channels), Got: fmt.Sprint(c)}
	}
	if h < 32 || w < 32 {
		return &InputError{Field: "height x width", Want: fmt.Sprintf("at least 32x32 (this server: %dx%d)", s.cfg.Height, s.cfg.Width), Got: fmt.Sprintf("%dx%d", h, w)}
	}
	if h != s.cfg.Height {
		return &InputError{Field: "height", Want: fmt.Sprint(s.cfg.Height), Got: fmt.Sprint(h)}
	}
	if w != s.cfg.Width {
		return &InputError{Field: "width", Want: fmt.Sprint(s.cfg.Width), Got: fmt.Sprint(w)}
	}
	if n < 1 || n > s.cfg.MaxBatch {
		return &InputError{Field: "batch", Want: fmt.Sprintf("1..%d", s.cfg.MaxBatch), Got: fmt.Sprint(n)}
	}
	if want := n * c * h * w; len(in.Data) != want {
		return &InputError{Field: "data", Want: fmt.Sprintf("%d values for shape %v", want, in.Shape), Got: fmt.Sprintf("%d values", len(in.Data))}
	}
	if s.cfg.RejectNonFinite {
		for i, v := range in.Data {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return &InputError{Field: "value", Want: "finite values", Got: fmt.Sprintf("%v at index %d", v, i)}
			}
		}
	}
	return nil
}

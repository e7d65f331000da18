package backend

import (
	"fmt"
	"math"
)

// Normalization maps uint8 image bytes to the model's float input, per
// channel: x = (v/255 - Mean[c]) / Std[c], as torchvision's ToTensor and
// Normalize compute it in float32: a division by 255, a subtraction, a
// division, each rounded. Host code (Table, Widen) and the cuda back-end's
// kernel compute exactly this, so the same bytes give the same float input
// wherever they are normalised.
type Normalization struct {
	Mean, Std []float32
}

// ImageNet is torchvision's normalisation for ImageNet-trained models.
var ImageNet = Normalization{Mean: []float32{0.485, 0.456, 0.406}, Std: []float32{0.229, 0.224, 0.225}}

// IsZero reports whether n has neither means nor stds (meaning: ImageNet,
// wherever a Normalization is a setting).
func (n Normalization) IsZero() bool { return n.Mean == nil && n.Std == nil }

// Check reports whether n has one mean and one finite, non-zero std per
// channel, and finite means.
func (n Normalization) Check(channels int) error {
	if len(n.Mean) != channels || len(n.Std) != channels {
		return fmt.Errorf("backend: uint8 normalisation has %d means and %d stds for %d channels", len(n.Mean), len(n.Std), channels)
	}
	for c := range channels {
		m, s := float64(n.Mean[c]), float64(n.Std[c])
		if s == 0 || math.IsNaN(s) || math.IsInf(s, 0) || math.IsNaN(m) || math.IsInf(m, 0) {
			return fmt.Errorf("backend: uint8 normalisation mean %v std %v", n.Mean, n.Std)
		}
	}
	return nil
}

// Table returns, per channel, the float input of every uint8 value.
func (n Normalization) Table() [][256]float32 {
	t := make([][256]float32, len(n.Mean))
	for c := range t {
		for v := range t[c] {
			x := float32(v) / 255
			x -= n.Mean[c]
			t[c][v] = x / n.Std[c]
		}
	}
	return t
}

// Widen writes the normalised float input of the uint8 images src ([n, C, H,
// W], plane = H*W pixels, C = len(table)) into dst (len(src) values), with a
// table from Normalization.Table.
func Widen(dst []float32, src []uint8, table [][256]float32, plane int) {
	for off := 0; off < len(src); off += plane {
		t := &table[(off/plane)%len(table)]
		for i, v := range src[off : off+plane] {
			dst[off+i] = t[v]
		}
	}
}

package conv

import "fmt"

// MaxPool is the stem's 3x3 max-pool with stride 2 and padding 1, for
// inputs that are never negative (they follow a ReLU): the input's zero
// padding then stands in for the pool's, since every window holds at least
// one pixel of the image. It is read-only after NewMaxPool.
type MaxPool struct {
	in, out Layout
}

// NewMaxPool returns the pool of input layout in (padding at least 1),
// writing outPad rows and columns of zeros around each output image.
func NewMaxPool(in Layout, outPad int) (*MaxPool, error) {
	if in.Pad < 1 || in.H < 1 || in.W < 1 || outPad < 0 {
		return nil, fmt.Errorf("conv: max-pool of %+v with output padding %d", in, outPad)
	}
	out := Layout{H: (in.H-1)/2 + 1, W: (in.W-1)/2 + 1, C: in.C, Pitch: in.Pitch, Pad: outPad}
	return &MaxPool{in: in, out: out}, nil
}

// In is the layout the pool reads.
func (p *MaxPool) In() Layout { return p.in }

// Out is the layout the pool writes.
func (p *MaxPool) Out() Layout { return p.out }

// reads returns the first and last input rows (inside the image) that
// output row oy reads.
func (p *MaxPool) reads(oy int) (y0, y1 int) {
	return max(0, 2*oy-1), min(p.in.H-1, 2*oy+1)
}

// row writes output row oy of image img.
func (p *MaxPool) row(in, out []float32, img, oy int) {
	il, ol := p.in, p.out
	pitch, rp := il.Pitch, il.RowPitch()
	for ox := 0; ox < ol.W; ox++ {
		o := ol.Offset(img, oy, ox)
		max9(out[o:o+pitch], in[il.Offset(img, 2*oy-1, 2*ox-1):], pitch, rp)
	}
	zeroPadding(out, ol, img, oy, 0, pitch)
}

// max9Go sets d[i] to the maximum of src[ky*row + kx*pix + i] over ky and kx
// in 0..2.
func max9Go(d, src []float32, pix, row int) {
	_ = src[2*row+2*pix+len(d)-1]
	for i := range d {
		m := src[i]
		for ky := 0; ky < 3; ky++ {
			for kx := 0; kx < 3; kx++ {
				m = max(m, src[ky*row+kx*pix+i])
			}
		}
		d[i] = m
	}
}

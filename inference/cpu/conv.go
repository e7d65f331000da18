package cpu

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/internal/gemm"
	"github.com/inferbench/inferbench/inference/resnet"
)

// convLayer is a folded convolution with its input and output geometry. It
// runs as one GEMM over the implicit im2col matrix of its input (no im2col
// buffer), with the bias, the residual and the ReLU applied as the tiles of
// the output are written.
type convLayer struct {
	in, out, k, stride, pad int
	w                       *gemm.PackedA // the weights as an out x (in*k*k) matrix, packed
	bias                    []float32
	inH, inW                int
	outH, outW              int
	relu                    bool
}

// newConv packs c's weights for the GEMM kernel that the pool will use; the
// layer keeps no reference to c.Weight.
func newConv(c *resnet.FoldedConv, h, w int, relu bool) (convLayer, error) {
	pw, err := gemm.NewPackedA(c.Out, c.In*c.K*c.K, c.Weight, c.In*c.K*c.K)
	if err != nil {
		return convLayer{}, fmt.Errorf("cpu: %w", err)
	}
	return convLayer{
		in: c.In, out: c.Out, k: c.K, stride: c.Stride, pad: c.Pad, w: pw, bias: c.Bias,
		inH: h, inW: w, outH: c.OutSize(h), outW: c.OutSize(w), relu: relu,
	}, nil
}

// inSize and outSize are the values of one image's input and output.
func (l *convLayer) inSize() int  { return l.in * l.inH * l.inW }
func (l *convLayer) outSize() int { return l.out * l.outH * l.outW }

// run computes out = act(conv(in) + bias [+ res]) for one CHW image; res, if
// not nil, has out's shape.
func (l *convLayer) run(ctx *gemm.Context, in, out, res []float32) error {
	ep := gemm.Epilogue{Bias: l.bias, ReLU: l.relu}
	if res != nil {
		ep.Residual = res[:l.outSize()]
	}
	s := gemm.ConvShape{C: l.in, N: 1, H: l.inH, W: l.inW, K: l.k, Stride: l.stride, Pad: l.pad}
	return ctx.ConvPacked(l.w, in[:l.inSize()], s, out[:l.outSize()], ep)
}

// maxPool3x3s2 is the stem's 3x3 max-pool with stride 2 and padding 1 for
// channels lo..hi of in (h x w planes) into out (oh x ow planes).
func maxPool3x3s2(in, out []float32, lo, hi, h, w, oh, ow int) {
	for ch := lo; ch < hi; ch++ {
		src := in[ch*h*w : (ch+1)*h*w]
		dst := out[ch*oh*ow : (ch+1)*oh*ow]
		for oy := 0; oy < oh; oy++ {
			d := dst[oy*ow : (oy+1)*ow]
			y0, y1 := max(2*oy-1, 0), min(2*oy+1, h-1)
			rowMax3(d, src[y0*w:(y0+1)*w], true)
			for y := y0 + 1; y <= y1; y++ {
				rowMax3(d, src[y*w:(y+1)*w], false)
			}
		}
	}
}

// rowMax3 sets (first) or maximises d[ox] with the maximum of row[2ox-1..2ox+1]
// clipped to the row.
func rowMax3(d, row []float32, first bool) {
	w := len(row)
	for ox := range d {
		i0, i1 := max(2*ox-1, 0), min(2*ox+2, w)
		if ox > 0 && i1-i0 == 3 {
			// Interior: the loop below runs until the right edge.
			rowMax3Interior(d[ox:], row[i0:], first)
			break
		}
		m := row[i0]
		for _, v := range row[i0+1 : i1] {
			m = max(m, v)
		}
		if first || m > d[ox] {
			d[ox] = m
		}
	}
	// The right edge, where the window is clipped.
	for ox := len(d) - 1; ox > 0 && 2*ox+2 > w; ox-- {
		i0 := 2*ox - 1
		m := row[i0]
		for _, v := range row[i0+1 : w] {
			m = max(m, v)
		}
		if first || m > d[ox] {
			d[ox] = m
		}
	}
}

// rowMax3Interior handles the windows of d that lie inside row, where
// row[0] is the first window's first value; it stops at the first clipped
// window, which rowMax3 handles.
func rowMax3Interior(d, row []float32, first bool) {
	n := min(len(d), (len(row)-1)/2)
	if first {
		for i := 0; i < n; i++ {
			r := row[2*i : 2*i+3 : 2*i+3]
			d[i] = max(r[0], r[1], r[2])
		}
		return
	}
	for i := 0; i < n; i++ {
		r := row[2*i : 2*i+3 : 2*i+3]
		d[i] = max(d[i], r[0], r[1], r[2])
	}
}

// meanPool writes the mean of each hw-value plane of in to feat.
func meanPool(in, feat []float32, hw int) {
	for c := range feat {
		var sum float32
		for _, v := range in[c*hw : (c+1)*hw] {
			sum += v
		}
		feat[c] = sum / float32(hw)
	}
}

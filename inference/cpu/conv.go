package cpu

import "github.com/inferbench/inferbench/inference/internal/gemm"

// run computes out = act(conv(in) + bias [+ res]) for one image, NCHW.
func (l *convLayer) run(p *pool, s *scratch, in, out, res []float32) {
	c := l.c
	n := l.outH * l.outW
	b := in
	if !l.direct {
		im2col(in, s.col, c.In, l.inH, l.inW, c.K, c.Stride, c.Pad, l.outH, l.outW)
		b = s.col
	}
	p.run(n, func(lo, hi int) {
		gemm.Sgemm(c.Out, hi-lo, l.cols, c.Weight, l.cols, b[lo:], n, out[lo:], n)
		for o := 0; o < c.Out; o++ {
			row := out[o*n+lo : o*n+hi]
			bias := c.Bias[o]
			if res != nil {
				r := res[o*n+lo : o*n+hi]
				for j := range row {
					row[j] += bias + r[j]
				}
			} else {
				for j := range row {
					row[j] += bias
				}
			}
			if l.relu {
				for j, v := range row {
					if v < 0 {
						row[j] = 0
					}
				}
			}
		}
	})
}

// im2col lays out the receptive fields of in as a (C*K*K) x (OH*OW) matrix.
func im2col(in, col []float32, c, h, w, k, stride, pad, oh, ow int) {
	n := oh * ow
	for ch := 0; ch < c; ch++ {
		for ky := 0; ky < k; ky++ {
			for kx := 0; kx < k; kx++ {
				row := col[((ch*k+ky)*k+kx)*n : ((ch*k+ky)*k+kx+1)*n]
				for oy := 0; oy < oh; oy++ {
					iy := oy*stride - pad + ky
					dst := row[oy*ow : (oy+1)*ow]
					if iy < 0 || iy >= h {
						clear(dst)
						continue
					}
					src := in[(ch*h+iy)*w : (ch*h+iy+1)*w]
					for ox := range dst {
						ix := ox*stride - pad + kx
						if ix < 0 || ix >= w {
							dst[ox] = 0
						} else {
							dst[ox] = src[ix]
						}
					}
				}
			}
		}
	}
}

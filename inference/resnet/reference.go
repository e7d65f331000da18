package resnet

import (
	"fmt"
	"math"
)

// Reference runs m on n images of 3xHxW (NCHW, float32) in float64, layer by layer
// with batch-norm unfolded, and returns n*Classes logits. It is slow and exists to
// check the back-ends.
func (m *Model) Reference(x []float32, n, h, w int) ([]float64, error) {
	c := m.Arch.InChannels
	if len(x) != n*c*h*w {
		return nil, fmt.Errorf("resnet: %d values for %d images of %dx%dx%d, want %d", len(x), n, c, h, w, n*c*h*w)
	}
	if err := CheckInput(h, w); err != nil {
		return nil, err
	}
	out := make([]float64, 0, n*m.Arch.Classes)
	per := c * h * w
	for i := 0; i < n; i++ {
		t := tensor{c: c, h: h, w: w, v: make([]float64, per)}
		for j, v := range x[i*per : (i+1)*per] {
			t.v[j] = float64(v)
		}
		t = relu(bnorm(conv(t, &m.Stem), &m.StemBN))
		t = maxpool(t)
		for _, b := range m.Blocks() {
			short := t
			if b.Down != nil {
				short = bnorm(conv(t, b.Down), b.DownBN)
			}
			y := relu(bnorm(conv(t, &b.Conv1), &b.BN1))
			y = bnorm(conv(y, &b.Conv2), &b.BN2)
			for j := range y.v {
				y.v[j] += short.v[j]
			}
			t = relu(y)
		}
		feat := make([]float64, t.c)
		for ch := 0; ch < t.c; ch++ {
			var s float64
			for _, v := range t.v[ch*t.h*t.w : (ch+1)*t.h*t.w] {
				s += v
			}
			feat[ch] = s / float64(t.h*t.w)
		}
		for o := 0; o < m.FC.Out; o++ {
			s := float64(m.FC.Bias[o])
			for k := 0; k < m.FC.In; k++ {
				s += float64(m.FC.Weight[o*m.FC.In+k]) * feat[k]
			}
			out = append(out, s)
		}
	}
	return out, nil
}

type tensor struct {
	c, h, w int
	v       []float64
}

func conv(x tensor, c *Conv) tensor {
	oh, ow := c.OutSize(x.h), c.OutSize(x.w)
	y := tensor{c: c.Out, h: oh, w: ow, v: make([]float64, c.Out*oh*ow)}
	for o := 0; o < c.Out; o++ {
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				var s float64
				for i := 0; i < c.In; i++ {
					for ky := 0; ky < c.K; ky++ {
						iy := oy*c.Stride - c.Pad + ky
						if iy < 0 || iy >= x.h {
							continue
						}
						for kx := 0; kx < c.K; kx++ {
							ix := ox*c.Stride - c.Pad + kx
							if ix < 0 || ix >= x.w {
								continue
							}
							s += float64(c.Weight[((o*c.In+i)*c.K+ky)*c.K+kx]) * x.v[(i*x.h+iy)*x.w+ix]
						}
					}
				}
				y.v[(o*oh+oy)*ow+ox] = s
			}
		}
	}
	return y
}

func bnorm(x tensor, bn *BatchNorm) tensor {
	hw := x.h * x.w
	for ch := 0; ch < x.c; ch++ {
		scale := float64(bn.Gamma[ch]) / math.Sqrt(float64(bn.Var[ch])+Eps)
		for j := ch * hw; j < (ch+1)*hw; j++ {
			x.v[j] = (x.v[j]-float64(bn.Mean[ch]))*scale + float64(bn.Beta[ch])
		}
	}
	return x
}

func relu(x tensor) tensor {
	for j, v := range x.v {
		if v < 0 {
			x.v[j] = 0
		}
	}
	return x
}

func maxpool(x tensor) tensor {
	oh, ow := PoolSize(x.h), PoolSize(x.w)
	y := tensor{c: x.c, h: oh, w: ow, v: make([]float64, x.c*oh*ow)}
	for ch := 0; ch < x.c; ch++ {
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				best := math.Inf(-1)
				for ky := 0; ky < 3; ky++ {
					iy := oy*2 - 1 + ky
					if iy < 0 || iy >= x.h {
						continue
					}
					for kx := 0; kx < 3; kx++ {
						ix := ox*2 - 1 + kx
						if ix < 0 || ix >= x.w {
							continue
						}
						best = math.Max(best, x.v[(ch*x.h+iy)*x.w+ix])
					}
				}
				y.v[(ch*oh+oy)*ow+ox] = best
			}
		}
	}
	return y
}

package cpu

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/resnet"
)

// convLayer is a folded convolution with its input and output geometry.
type convLayer struct {
	c          *resnet.FoldedConv
	inH, inW   int
	outH, outW int
	cols       int // rows of the im2col matrix: In*K*K
	direct     bool
	relu       bool
}

type blockLayer struct {
	conv1, conv2 convLayer
	down         *convLayer
}

// network is a folded model laid out for one input size.
type network struct {
	stem         convLayer
	poolH, poolW int
	blocks       []blockLayer
	features     int
	fc           resnet.Linear
	classes      int
	inputSize    int // values per image
	maxAct       int // largest activation of one image, in values
	maxCol       int // largest im2col matrix of one image, in values
}

func newConv(c *resnet.FoldedConv, h, w int, relu bool) convLayer {
	l := convLayer{c: c, inH: h, inW: w, outH: c.OutSize(h), outW: c.OutSize(w), cols: c.In * c.K * c.K, relu: relu}
	l.direct = c.K == 1 && c.Stride == 1 && c.Pad == 0
	return l
}

func compile(f *resnet.Folded, h, w int) (*network, error) {
	n := &network{fc: f.FC, classes: f.FC.Out, features: f.FC.In, inputSize: f.Arch.InChannels * h * w}
	n.stem = newConv(&f.Stem, h, w, true)
	n.poolH, n.poolW = resnet.PoolSize(n.stem.outH), resnet.PoolSize(n.stem.outW)
	n.grow(n.stem)
	n.maxAct = max(n.maxAct, f.Stem.Out*n.poolH*n.poolW)
	ch, hh, ww := f.Stem.Out, n.poolH, n.poolW
	for i := range f.Blocks {
		b := &f.Blocks[i]
		if b.Conv1.In != ch {
			return nil, fmt.Errorf("cpu: block %d expects %d channels, gets %d", i, b.Conv1.In, ch)
		}
		bl := blockLayer{conv1: newConv(&b.Conv1, hh, ww, true)}
		bl.conv2 = newConv(&b.Conv2, bl.conv1.outH, bl.conv1.outW, true)
		if b.Down != nil {
			d := newConv(b.Down, hh, ww, false)
			bl.down = &d
			n.grow(d)
		}
		n.grow(bl.conv1)
		n.grow(bl.conv2)
		n.blocks = append(n.blocks, bl)
		ch, hh, ww = b.Conv2.Out, bl.conv2.outH, bl.conv2.outW
	}
	if ch != n.features {
		return nil, fmt.Errorf("cpu: classifier expects %d features, gets %d", n.features, ch)
	}
	return n, nil
}

func (n *network) grow(l convLayer) {
	n.maxAct = max(n.maxAct, l.c.Out*l.outH*l.outW, l.c.In*l.inH*l.inW)
	if !l.direct {
		n.maxCol = max(n.maxCol, l.cols*l.outH*l.outW)
	}
}

// scratch is one worker's memory for one image in flight.
type scratch struct {
	a, b, t, s []float32
	col        []float32
	feat       []float32
}

func (n *network) newScratch() *scratch {
	return &scratch{
		a: make([]float32, n.maxAct), b: make([]float32, n.maxAct),
		t: make([]float32, n.maxAct), s: make([]float32, n.maxAct),
		col: make([]float32, n.maxCol), feat: make([]float32, n.features),
	}
}

// forward computes the logits of one image x into out.
func (n *network) forward(p *pool, s *scratch, x, out []float32) {
	n.stem.run(p, s, x, s.a, nil)
	maxPool(s.a, s.b, n.stem.c.Out, n.stem.outH, n.stem.outW, n.poolH, n.poolW)
	cur, free := s.b, s.a
	for i := range n.blocks {
		bl := &n.blocks[i]
		bl.conv1.run(p, s, cur, s.t, nil)
		res := cur
		if bl.down != nil {
			bl.down.run(p, s, cur, s.s, nil)
			res = s.s
		}
		bl.conv2.run(p, s, s.t, free, res)
		cur, free = free, cur
	}
	last := n.blocks[len(n.blocks)-1].conv2
	hw := last.outH * last.outW
	for c := 0; c < n.features; c++ {
		var sum float32
		for _, v := range cur[c*hw : (c+1)*hw] {
			sum += v
		}
		s.feat[c] = sum / float32(hw)
	}
	for o := 0; o < n.classes; o++ {
		sum := n.fc.Bias[o]
		row := n.fc.Weight[o*n.features : (o+1)*n.features]
		for k, v := range s.feat {
			sum += row[k] * v
		}
		out[o] = sum
	}
}

func maxPool(in, out []float32, c, h, w, oh, ow int) {
	for ch := 0; ch < c; ch++ {
		src := in[ch*h*w : (ch+1)*h*w]
		dst := out[ch*oh*ow : (ch+1)*oh*ow]
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				best := float32(0)
				first := true
				for ky := oy*2 - 1; ky <= oy*2+1; ky++ {
					if ky < 0 || ky >= h {
						continue
					}
					for kx := ox*2 - 1; kx <= ox*2+1; kx++ {
						if kx < 0 || kx >= w {
							continue
						}
						if v := src[ky*w+kx]; first || v > best {
							best, first = v, false
						}
					}
				}
				dst[oy*ow+ox] = best
			}
		}
	}
}

package resnet

import (
	"math"

	"github.com/inferbench/inferbench/inference/internal/par"
)

// FoldedConv is a convolution with batch-norm folded in: y = conv(x, Weight) + Bias,
// weights in OIHW order.
type FoldedConv struct {
	Out, In, K, Stride, Pad int
	Weight                  []float32 // Out*In*K*K
	Bias                    []float32 // Out
}

// OutSize is the output height (or width) for an input of size h.
func (c *FoldedConv) OutSize(h int) int { return (h+2*c.Pad-c.K)/c.Stride + 1 }

// FoldedBlock is a BasicBlock with folded convolutions:
// relu(Conv2(relu(Conv1(x))) + shortcut), shortcut = Down(x) or x.
type FoldedBlock struct {
	Conv1, Conv2 FoldedConv
	Down         *FoldedConv
}

// Folded is the inference form of a Model that back-ends execute: every
// batch-norm folded into the convolution before it.
type Folded struct {
	Arch   Arch
	Stem   FoldedConv // followed by ReLU and a 3x3/2 max-pool with padding 1
	Blocks []FoldedBlock
	FC     Linear // after a global average pool
}

// Fold returns the folded form of m: w' = w*g/sqrt(v+eps), b' = beta - mean*g/sqrt(v+eps).
// m is not changed; Fold computes in float64.
// The convolutions are folded at once on all CPUs.
func (m *Model) Fold() *Folded {
	f := &Folded{Arch: m.Arch, FC: m.FC}
	var folds []func()
	add := func(dst *FoldedConv, c *Conv, bn *BatchNorm) {
		folds = append(folds, func() { *dst = foldConv(c, bn) })
	}
	add(&f.Stem, &m.Stem, &m.StemBN)
	blocks := m.Blocks()
	f.Blocks = make([]FoldedBlock, len(blocks))
	for i, b := range blocks {
		fb := &f.Blocks[i]
		add(&fb.Conv1, &b.Conv1, &b.BN1)
		add(&fb.Conv2, &b.Conv2, &b.BN2)
		if b.Down != nil {
			fb.Down = &FoldedConv{}
			add(fb.Down, b.Down, b.DownBN)
		}
	}
	par.Do(len(folds), func(i int) { folds[i]() })
	return f
}

func foldConv(c *Conv, bn *BatchNorm) FoldedConv {
	f := FoldedConv{Out: c.Out, In: c.In, K: c.K, Stride: c.Stride, Pad: c.Pad,
		Weight: make([]float32, len(c.Weight)), Bias: make([]float32, c.Out)}
	per := c.In * c.K * c.K
	for o := 0; o < c.Out; o++ {
		scale := float64(bn.Gamma[o]) / math.Sqrt(float64(bn.Var[o])+Eps)
		for i := o * per; i < (o+1)*per; i++ {
			f.Weight[i] = float32(float64(c.Weight[i]) * scale)
		}
		f.Bias[o] = float32(float64(bn.Beta[o]) - float64(bn.Mean[o])*scale)
	}
	return f
}

// PoolSize is the output size of the stem's 3x3/2 max-pool (padding 1) for input h.
func PoolSize(h int) int { return (h+2-3)/2 + 1 }

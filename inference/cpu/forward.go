package cpu

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/internal/gemm"
	"github.com/inferbench/inferbench/inference/resnet"
)

type blockLayer struct {
	conv1, conv2 convLayer
	down         *convLayer
}

// network is a folded model laid out for one input size. It is read-only once
// compiled and shared by the workers.
type network struct {
	stem         convLayer
	poolH, poolW int
	blocks       []blockLayer
	features     int
	fcT          []float32 // the classifier's weights transposed: features x classes
	fcBias       []float32
	classes      int
	inputSize    int // values per image
	maxAct       int // largest activation of one image, in values
}

func compile(f *resnet.Folded, h, w int) (*network, error) {
	n := &network{classes: f.FC.Out, features: f.FC.In, inputSize: f.Arch.InChannels * h * w, fcBias: f.FC.Bias}
	var err error
	if n.stem, err = newConv(&f.Stem, h, w, true); err != nil {
		return nil, err
	}
	n.poolH, n.poolW = resnet.PoolSize(n.stem.outH), resnet.PoolSize(n.stem.outW)
	n.grow(n.stem)
	ch, hh, ww := f.Stem.Out, n.poolH, n.poolW
	for i := range f.Blocks {
		b := &f.Blocks[i]
		if b.Conv1.In != ch {
			return nil, fmt.Errorf("cpu: block %d expects %d channels, gets %d", i, b.Conv1.In, ch)
		}
		var bl blockLayer
		if bl.conv1, err = newConv(&b.Conv1, hh, ww, true); err != nil {
			return nil, err
		}
		if bl.conv2, err = newConv(&b.Conv2, bl.conv1.outH, bl.conv1.outW, true); err != nil {
			return nil, err
		}
		if b.Down != nil {
			d, err := newConv(b.Down, hh, ww, false)
			if err != nil {
				return nil, err
			}
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
	n.fcT = make([]float32, n.features*n.classes)
	for o := 0; o < n.classes; o++ {
		for k := 0; k < n.features; k++ {
			n.fcT[k*n.classes+o] = f.FC.Weight[o*n.features+k]
		}
	}
	return n, nil
}

func (n *network) grow(l convLayer) {
	n.maxAct = max(n.maxAct, l.outSize(), l.inSize())
}

// scratch is one worker's memory for one image in flight.
type scratch struct {
	a, b, t, s []float32
	feat       []float32
	// pool holds the arguments of the parallel max-pool, and poolFn is the
	// function the threads run; both are made once so that a forward pass
	// does not allocate.
	pool struct {
		in, out      []float32
		h, w, oh, ow int
	}
	poolFn func(lo, hi int)
}

func (n *network) newScratch() *scratch {
	s := &scratch{
		a: make([]float32, n.maxAct), b: make([]float32, n.maxAct),
		t: make([]float32, n.maxAct), s: make([]float32, n.maxAct),
		feat: make([]float32, n.features),
	}
	s.poolFn = func(lo, hi int) {
		a := &s.pool
		maxPool3x3s2(a.in, a.out, lo, hi, a.h, a.w, a.oh, a.ow)
	}
	return s
}

// forward computes the logits of one image x (CHW) into out. It holds p for
// the whole pass, so concurrent workers take turns image by image.
func (n *network) forward(p *pool, s *scratch, x, out []float32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx := p.ctx
	if err := n.stem.run(ctx, x, s.a, nil); err != nil {
		return fmt.Errorf("cpu: stem: %w", err)
	}
	a := &s.pool
	a.in, a.out = s.a, s.b
	a.h, a.w, a.oh, a.ow = n.stem.outH, n.stem.outW, n.poolH, n.poolW
	err := ctx.Parallel(n.stem.out, 1, s.poolFn)
	a.in, a.out = nil, nil
	if err != nil {
		return fmt.Errorf("cpu: max-pool: %w", err)
	}
	cur, free := s.b, s.a
	for i := range n.blocks {
		bl := &n.blocks[i]
		if err := bl.conv1.run(ctx, cur, s.t, nil); err != nil {
			return fmt.Errorf("cpu: block %d: %w", i, err)
		}
		res := cur
		if bl.down != nil {
			if err := bl.down.run(ctx, cur, s.s, nil); err != nil {
				return fmt.Errorf("cpu: block %d shortcut: %w", i, err)
			}
			res = s.s
		}
		if err := bl.conv2.run(ctx, s.t, free, res); err != nil {
			return fmt.Errorf("cpu: block %d: %w", i, err)
		}
		cur, free = free, cur
	}
	last := n.blocks[len(n.blocks)-1].conv2
	meanPool(cur, s.feat, last.outH*last.outW)
	// logits (1 x classes) = feat (1 x features) · fcT + bias
	err = ctx.Gemm(1, n.classes, n.features, s.feat, n.features, n.fcT, n.classes, out[:n.classes], n.classes,
		gemm.Epilogue{Residual: n.fcBias})
	if err != nil {
		return fmt.Errorf("cpu: classifier: %w", err)
	}
	return nil
}

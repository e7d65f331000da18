package cpu

import (
	"fmt"
	"time"

	"github.com/inferbench/inferbench/inference/internal/cpu/conv"
	"github.com/inferbench/inferbench/inference/internal/cpu/gemm"
	"github.com/inferbench/inferbench/inference/resnet"
)

// maxImages is the most images one forward pass computes: a larger batch
// runs in passes of maxImages images, which bounds a worker's scratch memory
// (about 9 MB an image at 250x250) while every layer still sees enough rows
// to keep all threads busy.
const maxImages = 8

// actPad is the zero padding around every activation: the 3x3 convolutions
// and the max-pool read one pixel beyond the image.
const actPad = 1

type block struct {
	conv1, conv2 *conv.Layer
	down         *conv.Layer // the shortcut's 1x1 convolution, or nil
}

// network is a folded model laid out for one input size and kernel family.
// It is read-only once compiled and shared by the workers.
type network struct {
	input     conv.Layout // the stem's input: NHWC, 3 values a pixel
	stem      *conv.Layer
	pool      *conv.MaxPool
	blocks    []block
	features  int
	classes   int
	fc        *gemm.PackedA // the classifier's weights, classes x features
	fcBias    []float32
	serial    bool // each step a job of its own (cpuBackend.serial)
	inputSize int  // values per image, NCHW
	stemSize  int  // values per image of the buffer the stem writes
	actSize   int  // values per image of the largest activation after the stem
}

// compile lays out f for h x w inputs, every layer with plan's Kernel (the
// gemm.Context's), Tile and Threads.
func compile(f *resnet.Folded, h, w int, plan conv.Spec) (*network, error) {
	in := f.Arch.InChannels
	n := &network{
		classes: f.FC.Out, features: f.FC.In, inputSize: in * h * w, fcBias: f.FC.Bias,
		input: conv.Layout{H: h, W: w, C: in, Pitch: in, Pad: f.Stem.Pad},
	}
	var err error
	if n.stem, err = newLayer(&f.Stem, n.input, true, plan); err != nil {
		return nil, fmt.Errorf("cpu: stem: %w", err)
	}
	n.stemSize = n.stem.Out().ImagePitch()
	if n.pool, err = conv.NewMaxPool(n.stem.Out(), actPad); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	cur := n.pool.Out()
	n.actSize = cur.ImagePitch()
	for i := range f.Blocks {
		b := &f.Blocks[i]
		if b.Conv1.In != cur.C {
			return nil, fmt.Errorf("cpu: block %d expects %d channels, gets %d", i, b.Conv1.In, cur.C)
		}
		var bl block
		if bl.conv1, err = newLayer(&b.Conv1, cur, true, plan); err != nil {
			return nil, fmt.Errorf("cpu: block %d: %w", i, err)
		}
		if bl.conv2, err = newLayer(&b.Conv2, bl.conv1.Out(), true, plan); err != nil {
			return nil, fmt.Errorf("cpu: block %d: %w", i, err)
		}
		shortcut := cur
		if b.Down != nil {
			if bl.down, err = newLayer(b.Down, cur, false, plan); err != nil {
				return nil, fmt.Errorf("cpu: block %d shortcut: %w", i, err)
			}
			shortcut = bl.down.Out()
		}
		if shortcut != bl.conv2.Out() {
			return nil, fmt.Errorf("cpu: block %d: shortcut %+v does not match the output %+v", i, shortcut, bl.conv2.Out())
		}
		cur = bl.conv2.Out()
		n.actSize = max(n.actSize, bl.conv1.Out().ImagePitch(), cur.ImagePitch())
		n.blocks = append(n.blocks, bl)
	}
	if cur.C != n.features {
		return nil, fmt.Errorf("cpu: classifier expects %d features, gets %d", n.features, cur.C)
	}
	if n.fc, err = gemm.NewPackedA(n.classes, n.features, f.FC.Weight, n.features, plan.Kernel); err != nil {
		return nil, fmt.Errorf("cpu: classifier: %w", err)
	}
	return n, nil
}

// newLayer packs the folded convolution c reading layout in.
func newLayer(c *resnet.FoldedConv, in conv.Layout, relu bool, plan conv.Spec) (*conv.Layer, error) {
	if c.In != in.C {
		return nil, fmt.Errorf("convolution of %d channels reads %d", c.In, in.C)
	}
	return conv.NewLayer(conv.Spec{
		In: in, Out: c.Out, K: c.K, Stride: c.Stride, Pad: c.Pad,
		Weight: c.Weight, Bias: c.Bias, ReLU: relu, OutPad: actPad, Kernel: plan.Kernel, Tile: plan.Tile, Threads: plan.Threads,
	})
}

// scratch is one worker's memory for up to maxImages images in flight.
type scratch struct {
	run     *conv.Runner
	imgs    [][]float32  // the pass's images, NCHW
	x       []float32    // the stem's input
	a, b, s []float32    // activations
	t       [2][]float32 // the blocks' conv1 outputs, by block parity
	feat    []float32    // features x images
	logits  []float32    // classes x images

	// laps, when not nil (BenchmarkForwardLayers sets it), receives the
	// host time of each step of a pass, in the order of network.steps, in
	// nanoseconds added up over passes.
	laps []int64
	last time.Time // the end of the previous step (laps only)
}

// lap adds the time since the previous step to step i's lap, when laps are
// kept.
func (s *scratch) lap(i int) {
	if s.laps == nil {
		return
	}
	now := time.Now()
	s.laps[i] += int64(now.Sub(s.last))
	s.last = now
}

// steps names the steps of a forward pass in the order forward times them:
// the input's conversion, the stem, the max-pool, each block's convolutions
// (conv1 with the shortcut's down where there is one, then conv2) and the
// classifier's pooling and product, with the output's transposition.
func (n *network) steps() []string {
	names := []string{"input", "stem", "pool"}
	for i, bl := range n.blocks {
		if bl.down != nil {
			names = append(names, fmt.Sprintf("block%d.conv1+down", i))
		} else {
			names = append(names, fmt.Sprintf("block%d.conv1", i))
		}
		names = append(names, fmt.Sprintf("block%d.conv2", i))
	}
	return append(names, "avgpool", "fc")
}

func (n *network) newScratch(p *pool, images int) *scratch {
	return &scratch{
		run:  conv.NewRunner(p.ctx),
		imgs: make([][]float32, 0, images),
		x:    make([]float32, n.input.Size(images)),
		a:    make([]float32, images*max(n.stemSize, n.actSize)),
		b:    make([]float32, images*n.actSize),
		t:    [2][]float32{make([]float32, images*n.actSize), make([]float32, images*n.actSize)},
		s:    make([]float32, images*n.actSize),
		feat: make([]float32, images*n.features), logits: make([]float32, images*n.classes),
	}
}

// forward computes the logits of s.imgs (each one image, CHW) into out
// (images x classes). It holds p for the whole pass, so concurrent workers
// take turns batch by batch, each using every thread. The steps up to the
// average pool run as one job of the Runner, whose steps overlap, unless
// laps are kept (each step is then a job of its own, timed alone) or
// n.serial is set.
func (n *network) forward(p *pool, s *scratch, out []float32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	imgs := len(s.imgs)
	r := s.run
	overlap := s.laps == nil && !n.serial
	if s.laps != nil {
		s.last = time.Now()
	}
	if overlap {
		r.Begin()
	}
	step := 0
	if err := r.Input(n.input, s.imgs, s.x); err != nil {
		return fmt.Errorf("cpu: input: %w", err)
	}
	s.lap(step)
	step++
	if err := r.Run(n.stem, imgs, s.x, s.a, nil); err != nil {
		return fmt.Errorf("cpu: stem: %w", err)
	}
	s.lap(step)
	step++
	if err := r.Pool(n.pool, imgs, s.a, s.b); err != nil {
		return fmt.Errorf("cpu: max-pool: %w", err)
	}
	s.lap(step)
	step++
	cur, free := s.b, s.a
	for i := range n.blocks {
		bl := &n.blocks[i]
		// The shortcut's convolution reads what conv1 reads: one step.
		res, down := cur, conv.Conv{}
		if bl.down != nil {
			res, down = s.s, conv.Conv{L: bl.down, In: cur, Out: s.s}
		}
		// conv1 writes where the previous block's conv2 does not read, so
		// that the two steps overlap.
		t := s.t[i%2]
		if err := r.Run2(imgs, conv.Conv{L: bl.conv1, In: cur, Out: t}, down); err != nil {
			return fmt.Errorf("cpu: block %d: %w", i, err)
		}
		s.lap(step)
		step++
		if err := r.Run(bl.conv2, imgs, t, free, res); err != nil {
			return fmt.Errorf("cpu: block %d: %w", i, err)
		}
		s.lap(step)
		step++
		cur, free = free, cur
	}
	last := n.blocks[len(n.blocks)-1].conv2.Out()
	feat := s.feat[:n.features*imgs]
	if err := r.Mean(last, imgs, cur, feat); err != nil {
		return fmt.Errorf("cpu: average pool: %w", err)
	}
	if overlap {
		if err := r.End(); err != nil {
			return fmt.Errorf("cpu: %w", err)
		}
	}
	s.lap(step)
	step++
	// logits (classes x images) = fc (classes x features) · feat + bias
	logits := s.logits[:n.classes*imgs]
	if err := p.ctx.GemmPacked(n.fc, imgs, feat, imgs, logits, imgs, gemm.Epilogue{Bias: n.fcBias}); err != nil {
		return fmt.Errorf("cpu: classifier: %w", err)
	}
	for i := 0; i < imgs; i++ {
		o := out[i*n.classes : (i+1)*n.classes]
		for c := range o {
			o[c] = logits[c*imgs+i]
		}
	}
	s.lap(step)
	return nil
}

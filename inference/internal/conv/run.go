package conv

import "fmt"

// Threads runs functions over index ranges on a set of threads, as
// gemm.Context does.
type Threads interface {
	// Threads is the number of threads.
	Threads() int
	// Parallel calls fn(thread, lo, hi) for disjoint ranges that cover
	// [0, n), in chunks of grain indices, on the threads, and returns when
	// every call has returned; no two calls with one thread index, in
	// [0, Threads()), run at once.
	Parallel(n, grain int, fn func(thread, lo, hi int)) error
}

// op is the kind of operation a Runner has in progress.
type op int

const (
	opConv op = iota // direct or Winograd, one or two layers
	opPool
	opInput
	opMean
)

// Runner runs layers on threads. It holds the arguments of the operation in
// progress, so that a run allocates nothing; it is not safe for concurrent
// use (give each goroutine that runs layers its own).
type Runner struct {
	threads Threads
	fn      func(thread, lo, hi int)

	op      op
	convs   [2]convRun // opConv's, the second unused (l nil) for one layer
	pool    *MaxPool
	layout  Layout      // opInput's
	imgs    [][]float32 // opInput's
	in, out []float32
	n       int         // images
	scratch [][]float32 // per thread (Winograd layers)
	rows    int         // channels per task (opMean)
	blocks  int         // tasks per image (opMean)
}

// convRun is a convolution in progress: its layer, its n images' buffers,
// and how its tasks cut it.
type convRun struct {
	l            *Layer
	n            int
	in, out, res []float32
	rows         int // output rows (direct) or tiles (Winograd) a task
	blocks       int // row blocks a channel group (direct)
	tasks        int
}

// Conv is one convolution of a step that Runner.Run2 computes: layer L
// reads In and writes Out (its padding too), adding Res, if not nil, before
// the ReLU.
type Conv struct {
	L            *Layer
	In, Out, Res []float32
}

// NewRunner returns a Runner that runs layers on t.
func NewRunner(t Threads) *Runner {
	r := &Runner{threads: t}
	r.fn = r.tasks
	return r
}

// Run computes l for n images: in holds n images in l.In(), out receives
// them in l.Out() (its padding too), and res, if not nil, holds n images in
// l.Out() added before the ReLU. out must not overlap in or res.
func (r *Runner) Run(l *Layer, n int, in, out, res []float32) error {
	return r.Run2(n, Conv{L: l, In: in, Out: out, Res: res}, Conv{})
}

// Run2 computes two convolutions of n images that do not depend on each
// other (a block's first convolution and its shortcut's, which read the
// same input) as one step: the threads take a's tasks and then b's, so b's
// fill the time they would otherwise wait at the end of a, and the step has
// one wait instead of two. b.L nil computes a alone, as Run does. Neither
// Out may overlap an In, a Res or the other Out.
func (r *Runner) Run2(n int, a, b Conv) error {
	if err := r.convs[0].prepare(a, n, r.threads.Threads()); err != nil {
		return err
	}
	tasks := r.convs[0].tasks
	if b.L != nil {
		if err := r.convs[1].prepare(b, n, r.threads.Threads()); err != nil {
			r.convs[0] = convRun{}
			return err
		}
		tasks += r.convs[1].tasks
	}
	for _, c := range r.convs {
		if c.l != nil && c.l.wino != nil {
			r.growScratch(c.l)
		}
	}
	r.op = opConv
	return r.run(tasks)
}

// prepare checks the convolution cv of n images and cuts it into tasks for
// t threads.
func (c *convRun) prepare(cv Conv, n, t int) error {
	l := cv.L
	switch {
	case l == nil:
		return fmt.Errorf("conv: no layer")
	case n < 1:
		return fmt.Errorf("conv: %d images", n)
	case len(cv.In) < l.in.Size(n):
		return fmt.Errorf("conv: input has %d values, want %d", len(cv.In), l.in.Size(n))
	case len(cv.Out) < l.out.Size(n):
		return fmt.Errorf("conv: output has %d values, want %d", len(cv.Out), l.out.Size(n))
	case cv.Res != nil && len(cv.Res) < l.out.Size(n):
		return fmt.Errorf("conv: residual has %d values, want %d", len(cv.Res), l.out.Size(n))
	}
	*c = convRun{l: l, n: n, in: cv.In, out: cv.Out, res: cv.Res}
	if wg := l.wino; wg != nil {
		// Tiles per task: at most tb, fewer (in sixes, the kernels'
		// pixels) until each thread has winoTasksPerThread tasks.
		tiles := n * wg.th * wg.tw
		per := (tiles*wg.nsets() + winoTasksPerThread*t - 1) / (winoTasksPerThread * t)
		c.rows = min(wg.tb, max(6, (per+5)/6*6))
		c.tasks = (tiles + c.rows - 1) / c.rows * wg.nsets()
		return nil
	}
	rows := n * l.out.H
	blocks := l.split(n, t)
	c.rows = (rows + blocks - 1) / blocks
	c.blocks = (rows + c.rows - 1) / c.rows
	c.tasks = c.blocks * (len(l.sets) - 1)
	return nil
}

// growScratch gives every thread the scratch a task of Winograd layer l
// needs.
func (r *Runner) growScratch(l *Layer) {
	wg := l.wino
	need := wg.pos()*(wg.stride(l.in.Pitch)+wg.stride(4*unit)) + wg.pos()*l.in.Pitch
	for len(r.scratch) < r.threads.Threads() {
		r.scratch = append(r.scratch, nil)
	}
	for i := range r.scratch {
		if len(r.scratch[i]) < need {
			r.scratch[i] = make([]float32, need)
		}
	}
}

// Pool computes p for n images: in holds them in p.In(), out receives them
// in p.Out(). out must not overlap in.
func (r *Runner) Pool(p *MaxPool, n int, in, out []float32) error {
	switch {
	case n < 1:
		return fmt.Errorf("conv: %d images", n)
	case len(in) < p.in.Size(n):
		return fmt.Errorf("conv: input has %d values, want %d", len(in), p.in.Size(n))
	case len(out) < p.out.Size(n):
		return fmt.Errorf("conv: output has %d values, want %d", len(out), p.out.Size(n))
	}
	r.op, r.pool, r.n, r.in, r.out = opPool, p, n, in, out
	return r.run(n * p.out.H)
}

// Input writes images, each l.C x l.H x l.W values (NCHW), to out in layout
// l, padding included.
func (r *Runner) Input(l Layout, imgs [][]float32, out []float32) error {
	n := len(imgs)
	if len(out) < l.Size(n) {
		return fmt.Errorf("conv: output has %d values, want %d", len(out), l.Size(n))
	}
	for i, img := range imgs {
		if len(img) != l.C*l.H*l.W {
			return fmt.Errorf("conv: image %d has %d values, want %d", i, len(img), l.C*l.H*l.W)
		}
	}
	r.op, r.layout, r.imgs, r.n, r.out = opInput, l, imgs, n, out
	return r.run(n * l.H)
}

// meanMinChunk is the fewest channels a task of Mean sums, unless the image
// has fewer.
const meanMinChunk = 128

// Mean writes to feat (l.C x n values, channel-major: feat[c*n + i]) the
// mean over the pixels of each channel of each of the n images in in
// (layout l): the classifier's global average pool. A task sums one image's
// pixels, in memory order, for a run of its channels: the image's C
// channels are cut into as few runs (of at least meanMinChunk channels) as
// keep the threads busy, so that a task reads long stretches of memory one
// after another. The input was written by other threads a moment earlier;
// reading it in short pieces far apart (64 channels of a 512-channel pixel,
// one pixel after another) took 153 µs for 1 MB at batch 8 on 16 threads
// (results/nvidia-h200-host/cpu17), for 0.5 µs of additions a task.
func (r *Runner) Mean(l Layout, n int, in, feat []float32) error {
	switch {
	case n < 1:
		return fmt.Errorf("conv: %d images", n)
	case len(in) < l.Size(n):
		return fmt.Errorf("conv: input has %d values, want %d", len(in), l.Size(n))
	case len(feat) < l.C*n:
		return fmt.Errorf("conv: features have %d values, want %d", len(feat), l.C*n)
	}
	chunks := max(1, min(l.C/meanMinChunk, (r.threads.Threads()+n-1)/n))
	r.rows = (l.C + chunks - 1) / chunks // channels a task
	r.blocks = (l.C + r.rows - 1) / r.rows
	r.op, r.layout, r.n, r.in, r.out = opMean, l, n, in, feat
	return r.run(n * r.blocks)
}

// meanTask sums the channels [c0, c0+r.rows) of image t / r.blocks, where
// c0 is t mod r.blocks times r.rows, in runs of at most 512 channels (its
// accumulators).
func (r *Runner) meanTask(t int) {
	l := r.layout
	img, c0 := t/r.blocks, t%r.blocks*r.rows
	c1 := min(c0+r.rows, l.C)
	scale := 1 / float32(l.H*l.W)
	var acc [4 * meanMinChunk]float32
	for ; c0 < c1; c0 += len(acc) {
		sum := acc[:min(len(acc), c1-c0)]
		clear(sum)
		for y := 0; y < l.H; y++ {
			row := r.in[l.Offset(img, y, 0)+c0:]
			for x := 0; x < l.W; x++ {
				px := row[x*l.Pitch:][:len(sum)]
				for c := range sum {
					sum[c] += px[c]
				}
			}
		}
		for c, v := range sum {
			r.out[(c0+c)*r.n+img] = v * scale
		}
	}
}

// run runs the operation's tasks and drops the references to its data.
func (r *Runner) run(tasks int) error {
	err := r.threads.Parallel(tasks, 1, r.fn)
	r.convs, r.pool, r.imgs, r.in, r.out = [2]convRun{}, nil, nil, nil, nil
	return err
}

func (r *Runner) tasks(thread, lo, hi int) {
	for t := lo; t < hi; t++ {
		switch r.op {
		case opConv:
			c, ct := &r.convs[0], t
			if ct >= c.tasks {
				c, ct = &r.convs[1], ct-c.tasks
			}
			if c.l.wino != nil {
				c.winoTask(r.scratch[thread], ct)
			} else {
				c.convTask(ct)
			}
		case opPool:
			r.pool.row(r.in, r.out, t/r.pool.out.H, t%r.pool.out.H)
		case opInput:
			r.inputRow(t/r.layout.H, t%r.layout.H)
		case opMean:
			r.meanTask(t)
		}
	}
}

// convTask computes output rows [b*rows, (b+1)*rows) of the batch for
// group set t / blocks, where b is t mod blocks: consecutive tasks share a
// set, and so its weights. For each block of pixels it runs the set's
// groups one after another, which read the same input.
func (c *convRun) convTask(t int) {
	l := c.l
	set := l.groups[l.sets[t/c.blocks]:l.sets[t/c.blocks+1]]
	row0 := t % c.blocks * c.rows
	row1 := min(row0+c.rows, c.n*l.out.H)
	in, out := l.in, l.out
	p := l.px[set[0].units]
	for _, gr := range set[1:] {
		p = min(p, l.px[gr.units])
	}
	k, st := l.k, l.stride
	tl := tile{nky: k, xrow: in.RowPitch(), xpix: st * in.Pitch, opix: out.Pitch}
	// The channels of a kernel row's columns are contiguous in the input
	// and the weights: one run of k*Pitch values a row.
	tl.nkx, tl.nc = 1, k*in.Pitch
	tl.flags = flagBias
	if l.relu {
		tl.flags |= flagReLU
	}
	if c.res != nil {
		tl.flags |= flagResidual
	}
	for row := row0; row < row1; row++ {
		img, oy := row/out.H, row%out.H
		for ox := 0; ox < out.W; ox += p {
			pp := min(p, out.W-ox)
			x := c.in[in.Offset(img, oy*st-l.pad, ox*st-l.pad):]
			o := out.Offset(img, oy, ox)
			for _, gr := range set {
				tl.x, tl.w, tl.bias = x, l.w[gr.w:], l.bias[gr.u0*unit:]
				tl.out = c.out[o+gr.u0*unit:]
				if c.res != nil {
					tl.res = c.res[o+gr.u0*unit:]
				}
				l.kern.run(pp, gr.units, &tl)
			}
		}
	}
	last := set[len(set)-1]
	c0, c1 := set[0].u0*unit, (last.u0+last.units)*unit
	for row := row0; row < row1; row++ {
		zeroPadding(c.out, out, row/out.H, row%out.H, c0, c1-c0)
	}
}

// inputRow writes row y of image img and its padding.
func (r *Runner) inputRow(img, y int) {
	l := r.layout
	src := r.imgs[img]
	plane := l.H * l.W
	row := r.out[l.Offset(img, y, 0):][:l.W*l.Pitch]
	if l.C == 3 && l.Pitch == 3 {
		// The stem's input: one pass writing each pixel's three values
		// together, from three rows read in step.
		s0 := src[y*l.W:][:l.W]
		s1 := src[plane+y*l.W:][:len(s0)]
		s2 := src[2*plane+y*l.W:][:len(s0)]
		row = row[:3*len(s0)]
		for x := range s0 {
			px := row[3*x : 3*x+3 : 3*x+3]
			px[0], px[1], px[2] = s0[x], s1[x], s2[x]
		}
		zeroPadding(r.out, l, img, y, 0, l.Pitch)
		return
	}
	for c := 0; c < l.C; c++ {
		s := src[c*plane+y*l.W:][:l.W]
		for x, v := range s {
			row[x*l.Pitch+c] = v
		}
	}
	if l.C < l.Pitch {
		for x := 0; x < l.W; x++ {
			clear(row[x*l.Pitch+l.C : (x+1)*l.Pitch])
		}
	}
	zeroPadding(r.out, l, img, y, 0, l.Pitch)
}

// zeroPadding zeroes channels [c0, c0+v) of the padding columns of row y of
// image img in layout l, and of the padding rows above the first row or
// below the last.
func zeroPadding(buf []float32, l Layout, img, y, c0, v int) {
	pad, p := l.Pad, l.Pitch
	left, right := l.Offset(img, y, -pad)+c0, l.Offset(img, y, l.W)+c0
	for x := 0; x < pad; x++ {
		clear(buf[left+x*p:][:v])
		clear(buf[right+x*p:][:v])
	}
	if y == 0 {
		zeroRows(buf, l, img, -pad, 0, c0, v)
	}
	if y == l.H-1 {
		zeroRows(buf, l, img, l.H, l.H+pad, c0, v)
	}
}

// zeroRows zeroes channels [c0, c0+v) of every pixel of rows [y0, y1) of
// image img, padding columns included.
func zeroRows(buf []float32, l Layout, img, y0, y1, c0, v int) {
	if y0 >= y1 {
		return
	}
	if c0 == 0 && v == l.Pitch {
		clear(buf[l.Offset(img, y0, -l.Pad):l.Offset(img, y1, -l.Pad)])
		return
	}
	for y := y0; y < y1; y++ {
		row := buf[l.Offset(img, y, -l.Pad)+c0:]
		for x := 0; x < l.W+2*l.Pad; x++ {
			clear(row[x*l.Pitch:][:v])
		}
	}
}

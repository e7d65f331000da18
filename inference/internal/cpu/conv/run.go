package conv

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Threads runs functions over index ranges on a set of threads, as
// gemm.Context does.
type Threads interface {
	// Threads is the number of threads.
	Threads() int
	// Parallel calls fn(thread, lo, hi) for disjoint ranges that cover
	// [0, n), in chunks of grain indices, on the threads, and returns when
	// every call has returned; no two calls with one thread index, in
	// [0, Threads()), run at once. Threads take the chunks in increasing
	// order, each as it frees up, so a call may wait for what an earlier
	// chunk writes: that chunk has a thread of its own.
	Parallel(n, grain int, fn func(thread, lo, hi int)) error
	// Pause is turn i (from 1) of a loop in which a call of fn waits for
	// an earlier chunk: it spins, yielding the CPU now and then.
	Pause(i int)
}

// op is the kind of a step.
type op int

const (
	opConv op = iota // direct or Winograd, one or two layers
	opPool
	opInput
	opMean
)

// Runner runs layers on threads. Each of Run, Run2, Pool, Input and Mean
// is a step; called between Begin and End, a step is checked and queued, and
// End runs the queued steps as one job, whose steps overlap (see step). A
// Runner holds the arguments of its steps, so that a run allocates nothing
// once its buffers have grown; it is not safe for concurrent use (give each
// goroutine that runs layers its own).
type Runner struct {
	threads Threads
	fn      func(thread, lo, hi int)

	steps   []*step // steps[:queued] are queued (or running)
	queued  int
	begun   bool         // between Begin and End
	scratch [][]float32  // per thread (Winograd layers)
	failed  atomic.Bool  // a task of the running job panicked
	settled atomic.Int32 // steps[:settled+1] of the running job are known finished
}

// A step is one operation of a job: its tasks are the job's tasks
// [first, first+tasks). The steps of a job overlap: a thread that finds no
// task of a step left takes the next step's first task, and runs it as soon
// as the rows it reads are written, rather than waiting for every thread to
// finish the step. So a task of step s waits for
//   - the steps up to s-2 to finish (what they wrote is then complete, and
//     what they read will not be read again: s may overwrite it);
//   - the steps up to s-1 to finish, if s writes memory s-1 reads or
//     writes, or reads what s-1 writes but keeps no count of (barrier);
//   - otherwise the rows it reads of what step s-1 writes (deps), which
//     step s-1 counts as its tasks finish (outs).
//
// The overlap exists because a forward pass is some 20 steps, and without it
// threads wait at each step's end for its last task.
type step struct {
	op     op
	convs  [2]convRun // opConv's, the second unused (l nil) for one layer
	pool   *MaxPool
	layout Layout      // opInput's and opMean's
	imgs   [][]float32 // opInput's
	in     []float32   // opPool's and opMean's
	out    []float32   // opPool's, opInput's and opMean's
	n      int         // images
	rows   int         // channels per task (opMean)
	blocks int         // tasks per image (opMean)
	tasks  int
	first  int

	done    atomic.Int32 // tasks finished
	barrier bool
	deps    []dep
	outs    [2]progress // rows written: the output's, and convs[1]'s
}

// dep is a row dependency of a step's tasks on what the step before writes:
// the rows that input reads (of convs[conv] for opConv) must be complete in
// p. res means the input is a convolution's residual, read at the rows it
// writes.
type dep struct {
	p    *progress
	conv int
	res  bool
}

// progress counts what a step's tasks have written of an output: done[u]
// for a unit of unit rows (1, or a Winograd tile's m), unit u of an image's
// per; the unit is complete at target (a count per channel set, or per tile
// and set).
type progress struct {
	unit, per int // rows a unit, units an image
	target    int32
	done      []atomic.Int32
}

// reset sizes p for n images of h rows, in units of unit rows complete at
// target, all incomplete.
func (p *progress) reset(n, h, unit int, target int32) {
	p.unit, p.per, p.target = unit, (h+unit-1)/unit, target
	if need := n * p.per; cap(p.done) < need {
		p.done = make([]atomic.Int32, need)
	} else {
		p.done = p.done[:need]
		for i := range p.done {
			p.done[i].Store(0)
		}
	}
}

// unitOf is the unit of row y of image img.
func (p *progress) unitOf(img, y int) int { return img*p.per + y/p.unit }

// complete reports whether units u0 to u1, both included, are complete.
func (p *progress) complete(u0, u1 int) bool {
	for u := u0; u <= u1; u++ {
		if p.done[u].Load() < p.target {
			return false
		}
	}
	return true
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

// Begin makes the steps that follow, up to End, one job: each call checks
// its step and queues it. Steps queued earlier and not run are dropped. A
// step that fails its checks drops every queued step and ends the job
// before it starts: the steps after it run at once, and End runs nothing.
// Which steps wait for which follows from the memory they read and write
// (see step); the images of an Input step are not counted, so no step of
// the job may write them.
func (r *Runner) Begin() {
	r.clear()
	r.begun = true
}

// End runs the steps queued since Begin as one job and returns when all are
// done.
func (r *Runner) End() error {
	r.begun = false
	return r.run()
}

// add returns a step to fill in, and queues it.
func (r *Runner) add() *step {
	if r.queued == len(r.steps) {
		r.steps = append(r.steps, new(step))
	}
	s := r.steps[r.queued]
	r.queued++
	return s
}

// queue runs the step added last unless the Runner is between Begin and
// End.
func (r *Runner) queue() error {
	if r.begun {
		return nil
	}
	return r.run()
}

// refuse drops the queued steps and ends the job begun, for a step that
// failed its checks with err, and returns err.
func (r *Runner) refuse(err error) error {
	r.clear()
	r.begun = false
	return err
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
// fill the time they would otherwise wait at the end of a. b.L nil computes
// a alone, as Run does. Neither Out may overlap an In, a Res or the other
// Out.
func (r *Runner) Run2(n int, a, b Conv) error {
	t := r.threads.Threads()
	a.L, b.L = a.L.at(n, t), b.L.at(n, t)
	s := r.add()
	s.op, s.n = opConv, n
	if err := s.convs[0].prepare(a, n, t); err != nil {
		return r.refuse(err)
	}
	s.tasks = s.convs[0].tasks
	if b.L != nil {
		if err := s.convs[1].prepare(b, n, t); err != nil {
			return r.refuse(err)
		}
		s.tasks += s.convs[1].tasks
	}
	for _, c := range s.convs {
		if c.l != nil && c.l.wino != nil {
			r.growScratch(c.l)
		}
	}
	return r.queue()
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
		return r.refuse(fmt.Errorf("conv: %d images", n))
	case len(in) < p.in.Size(n):
		return r.refuse(fmt.Errorf("conv: input has %d values, want %d", len(in), p.in.Size(n)))
	case len(out) < p.out.Size(n):
		return r.refuse(fmt.Errorf("conv: output has %d values, want %d", len(out), p.out.Size(n)))
	}
	s := r.add()
	s.op, s.pool, s.n, s.in, s.out, s.tasks = opPool, p, n, in, out, n*p.out.H
	return r.queue()
}

// Input writes images, each l.C x l.H x l.W values (NCHW), to out in layout
// l, padding included.
func (r *Runner) Input(l Layout, imgs [][]float32, out []float32) error {
	n := len(imgs)
	if len(out) < l.Size(n) {
		return r.refuse(fmt.Errorf("conv: output has %d values, want %d", len(out), l.Size(n)))
	}
	for i, img := range imgs {
		if len(img) != l.C*l.H*l.W {
			return r.refuse(fmt.Errorf("conv: image %d has %d values, want %d", i, len(img), l.C*l.H*l.W))
		}
	}
	s := r.add()
	s.op, s.layout, s.imgs, s.n, s.out, s.tasks = opInput, l, imgs, n, out, n*l.H
	return r.queue()
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
// after another: the input was written by other threads a moment earlier,
// and reading it in short pieces far apart is slow.
func (r *Runner) Mean(l Layout, n int, in, feat []float32) error {
	switch {
	case n < 1:
		return r.refuse(fmt.Errorf("conv: %d images", n))
	case len(in) < l.Size(n):
		return r.refuse(fmt.Errorf("conv: input has %d values, want %d", len(in), l.Size(n)))
	case len(feat) < l.C*n:
		return r.refuse(fmt.Errorf("conv: features have %d values, want %d", len(feat), l.C*n))
	}
	chunks := max(1, min(l.C/meanMinChunk, (r.threads.Threads()+n-1)/n))
	s := r.add()
	s.rows = (l.C + chunks - 1) / chunks // channels a task
	s.blocks = (l.C + s.rows - 1) / s.rows
	s.op, s.layout, s.n, s.in, s.out, s.tasks = opMean, l, n, in, feat, n*s.blocks
	return r.queue()
}

// meanTask sums the channels [c0, c0+s.rows) of image t / s.blocks, where
// c0 is t mod s.blocks times s.rows, in runs of at most 512 channels (its
// accumulators).
func (s *step) meanTask(t int) {
	l := s.layout
	img, c0 := t/s.blocks, t%s.blocks*s.rows
	c1 := min(c0+s.rows, l.C)
	scale := 1 / float32(l.H*l.W)
	var acc [4 * meanMinChunk]float32
	for ; c0 < c1; c0 += len(acc) {
		sum := acc[:min(len(acc), c1-c0)]
		clear(sum)
		for y := 0; y < l.H; y++ {
			row := s.in[l.Offset(img, y, 0)+c0:]
			for x := 0; x < l.W; x++ {
				px := row[x*l.Pitch:][:len(sum)]
				for c := range sum {
					sum[c] += px[c]
				}
			}
		}
		for c, v := range sum {
			s.out[(c0+c)*s.n+img] = v * scale
		}
	}
}

// run runs the queued steps as one job and drops the references to their
// data.
func (r *Runner) run() error {
	defer r.clear()
	total := 0
	for i, s := range r.steps[:r.queued] {
		s.first = total
		total += s.tasks
		s.done.Store(0)
		s.track()
		if i > 0 {
			s.link(r.steps[i-1])
		}
	}
	r.failed.Store(false)
	r.settled.Store(-1)
	return r.threads.Parallel(total, 1, r.fn)
}

// clear drops the queued steps.
func (r *Runner) clear() {
	for _, s := range r.steps[:r.queued] {
		s.clear()
	}
	r.queued = 0
}

// clear drops the step's references to data, keeping its counters' memory.
func (s *step) clear() {
	outs, deps := s.outs, s.deps[:0]
	*s = step{outs: outs, deps: deps}
}

// track sizes the counts of the rows the step writes.
func (s *step) track() {
	switch s.op {
	case opConv:
		for i, c := range s.convs {
			if c.l == nil {
				continue
			}
			if wg := c.l.wino; wg != nil {
				s.outs[i].reset(s.n, c.l.out.H, wg.m, int32(wg.tw*wg.nsets()))
			} else {
				s.outs[i].reset(s.n, c.l.out.H, 1, int32(len(c.l.sets)-1))
			}
		}
	case opPool:
		s.outs[0].reset(s.n, s.pool.out.H, 1, 1)
	case opInput:
		s.outs[0].reset(s.n, s.layout.H, 1, 1)
	}
}

// writes lists the memory the step writes, and its counts (nil where it
// keeps none).
func (s *step) writes() (bufs [2][]float32, counts [2]*progress) {
	if s.op == opConv {
		for i, c := range s.convs {
			if c.l != nil {
				bufs[i], counts[i] = c.out, &s.outs[i]
			}
		}
		return bufs, counts
	}
	bufs[0] = s.out
	if s.op != opMean {
		counts[0] = &s.outs[0]
	}
	return bufs, counts
}

// reads lists the memory the step reads, by convolution for opConv: its
// input and its residual.
func (s *step) reads() (bufs [2][2][]float32) {
	switch s.op {
	case opConv:
		for i, c := range s.convs {
			bufs[i] = [2][]float32{c.in, c.res}
		}
	case opPool, opMean:
		bufs[0][0] = s.in
	}
	return bufs
}

// link finds what the step's tasks wait for of prev, the step before (see
// step).
func (s *step) link(prev *step) {
	pw, counts := prev.writes()
	sw, _ := s.writes()
	for _, w := range sw {
		for _, rd := range prev.reads() {
			for _, b := range rd {
				s.barrier = s.barrier || overlaps(w, b)
			}
		}
		for _, b := range pw {
			s.barrier = s.barrier || overlaps(w, b)
		}
	}
	for ci, rd := range s.reads() {
		for ri, b := range rd {
			for wi, w := range pw {
				if !overlaps(b, w) {
					continue
				}
				if counts[wi] == nil {
					s.barrier = true
					continue
				}
				s.deps = append(s.deps, dep{p: counts[wi], conv: ci, res: ri == 1})
			}
		}
	}
	if s.barrier {
		s.deps = s.deps[:0]
	}
}

// overlaps reports whether a and b share memory.
func overlaps(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+4*uintptr(len(b)) && pb < pa+4*uintptr(len(a))
}

// tasks runs tasks [lo, hi) of the job.
func (r *Runner) tasks(thread, lo, hi int) {
	for t := lo; t < hi; t++ {
		r.task(thread, t)
	}
}

// task runs task t of the job once what it reads is written, or does
// nothing once a task has panicked (the job then fails, and what the
// panicked task would have written never is).
func (r *Runner) task(thread, t int) {
	i := 0
	for t >= r.steps[i].first+r.steps[i].tasks {
		i++
	}
	s := r.steps[i]
	t -= s.first
	before := i - 2 // the last step that must have finished
	if s.barrier {
		before = i - 1
	}
	if !r.await(func() bool { return r.finished(before) }) {
		return
	}
	for _, d := range s.deps {
		u0, u1, ok := s.needs(d, t)
		if ok && !r.await(func() bool { return d.p.complete(u0, u1) }) {
			return
		}
	}
	ok := false
	defer func() {
		if !ok {
			r.failed.Store(true)
		}
	}()
	switch s.op {
	case opConv:
		ci, ct := s.conv(t)
		c := &s.convs[ci]
		if c.l.wino != nil {
			c.winoTask(r.scratch[thread], ct)
		} else {
			c.convTask(ct)
		}
		c.wrote(&s.outs[ci], ct)
	case opPool:
		s.pool.row(s.in, s.out, t/s.pool.out.H, t%s.pool.out.H)
		s.outs[0].done[t].Add(1)
	case opInput:
		s.inputRow(t/s.layout.H, t%s.layout.H)
		s.outs[0].done[t].Add(1)
	case opMean:
		s.meanTask(t)
	}
	ok = true
	s.done.Add(1)
}

// await spins until ready returns true, and reports false, at once, if a
// task of the job panics first.
func (r *Runner) await(ready func() bool) bool {
	for i := 1; !ready(); i++ {
		if r.failed.Load() {
			return false
		}
		r.threads.Pause(i)
	}
	return true
}

// finished reports whether every task of the steps up to i has finished.
func (r *Runner) finished(i int) bool {
	for j := int(r.settled.Load()) + 1; j <= i; j++ {
		if s := r.steps[j]; int(s.done.Load()) < s.tasks {
			return false
		}
		r.settled.CompareAndSwap(int32(j-1), int32(j))
	}
	return true
}

// needs returns the units of d.p, u0 to u1, that task t of the step reads
// through d, or false where it reads none (a dependency of the step's
// other convolution).
func (s *step) needs(d dep, t int) (u0, u1 int, ok bool) {
	var img0, y0, img1, y1 int
	switch s.op {
	case opConv:
		ci, ct := s.conv(t)
		if d.conv != ci {
			return 0, 0, false
		}
		img0, y0, img1, y1 = s.convs[ci].reads(ct, d.res)
	case opPool:
		img, oy := t/s.pool.out.H, t%s.pool.out.H
		y0, y1 = s.pool.reads(oy)
		img0, img1 = img, img
	case opMean:
		img := t / s.blocks
		img0, y0, img1, y1 = img, 0, img, s.layout.H-1
	default:
		return 0, 0, false
	}
	return d.p.unitOf(img0, y0), d.p.unitOf(img1, y1), true
}

// conv returns the convolution of an opConv step that computes its task t,
// and that convolution's task.
func (s *step) conv(t int) (i, ct int) {
	if t >= s.convs[0].tasks {
		return 1, t - s.convs[0].tasks
	}
	return 0, t
}

// tiles returns the first tile over the batch of Winograd task t, and how
// many tiles it computes.
func (c *convRun) tiles(t int) (t0, nt int) {
	wg := c.l.wino
	t0 = t / wg.nsets() * c.rows
	return t0, min(c.rows, c.n*wg.th*wg.tw-t0)
}

// span returns the first and last (included) of the rows over the batch
// that task t writes: output rows (direct) or tile rows (Winograd), image
// by image.
func (c *convRun) span(t int) (first, last int) {
	if wg := c.l.wino; wg != nil {
		t0, nt := c.tiles(t)
		return t0 / wg.tw, (t0 + nt - 1) / wg.tw
	}
	row0 := t % c.blocks * c.rows
	return row0, min(row0+c.rows, c.n*c.l.out.H) - 1
}

// reads returns the rows, from (img0, y0) to (img1, y1), that task t
// reads of its residual (res) or of its input.
func (c *convRun) reads(t int, res bool) (img0, y0, img1, y1 int) {
	l := c.l
	first, last := c.span(t)
	if wg := l.wino; wg != nil {
		m := wg.m
		img0, y0, img1, y1 = first/wg.th, first%wg.th*m, last/wg.th, last%wg.th*m+m-1
		if res {
			return img0, y0, img1, min(y1, l.out.H-1)
		}
		return img0, max(0, y0-1), img1, min(l.in.H-1, y1+1)
	}
	h := l.out.H
	img0, y0, img1, y1 = first/h, first%h, last/h, last%h
	if res {
		return img0, y0, img1, y1
	}
	return img0, max(0, y0*l.stride-l.pad), img1, min(l.in.H-1, y1*l.stride-l.pad+l.k-1)
}

// wrote counts in p the rows that task t wrote: each output row (direct) or
// tile row (Winograd) once for every tile of it that the task computed.
func (c *convRun) wrote(p *progress, t int) {
	first, last := c.span(t)
	if wg := c.l.wino; wg != nil {
		t0, nt := c.tiles(t)
		t1 := t0 + nt
		for u := first; u <= last; u++ {
			p.done[u].Add(int32(min(t1, (u+1)*wg.tw) - max(t0, u*wg.tw)))
		}
		return
	}
	for u := first; u <= last; u++ {
		p.done[u].Add(1)
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
func (s *step) inputRow(img, y int) {
	l := s.layout
	src := s.imgs[img]
	plane := l.H * l.W
	row := s.out[l.Offset(img, y, 0):][:l.W*l.Pitch]
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
		zeroPadding(s.out, l, img, y, 0, l.Pitch)
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
	zeroPadding(s.out, l, img, y, 0, l.Pitch)
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

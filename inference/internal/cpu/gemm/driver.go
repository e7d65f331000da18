package gemm

import (
	"fmt"
	"sync/atomic"

	"github.com/inferbench/inferbench/inference/internal/fault"
)

// Blocking. A packed B block (kcMax x ncMax, 1 MiB) stays in the L2 or L3
// cache while the threads sweep A over it; a packed A block (mcMax x kcMax,
// 144 KiB) stays in L2; one B panel (kcMax x NR, 16 KiB for NR=16) stays in L1
// while the A panels of a block stream past it.
const (
	kcMax = 256
	mcMax = 144  // a multiple of every kernel's MR
	ncMax = 1024 // a multiple of every kernel's NR
)

// Epilogue flags, passed to the micro-kernels.
const (
	flagAccumulate = 1 << iota // add the tile to C instead of overwriting it
	flagBias                   // add bias[i] to row i
	flagResidual               // add the residual tile
	flagReLU                   // clamp at zero
)

// bSource is the right-hand operand of a product.
type bSource interface {
	// pack writes rows p0..p0+kc and columns j0..j0+nc of B into buf.b as
	// ceil(nc/nr) panels, panel q holding columns j0+q*nr.. as kc rows of nr
	// values; columns past j0+nc are zero.
	pack(buf *buffers, p0, kc, j0, nc, nr int)
}

// buffers are one thread's packing buffers.
type buffers struct {
	a    []float32 // mcMax x kcMax
	b    []float32 // kcMax x ncMax
	tile []float32 // MR x NR, for edge tiles
}

func newBuffers(k microKernel) *buffers {
	return &buffers{
		a:    make([]float32, mcMax*kcMax),
		b:    make([]float32, kcMax*ncMax),
		tile: make([]float32, k.mr*k.nr),
	}
}

// job is the product in progress. It lives in the Context and is reused.
type job struct {
	m, n, k int
	a       []float32
	lda     int
	pa      []float32 // A packed in advance (a packing's data), or nil
	b       bSource
	c       []float32
	ldc     int
	ep      Epilogue
	ldr     int
	epFlags int

	kc     int // k block size
	mt, nt int // task size in rows and columns
	tn     int // tasks along n
	tasks  int
	next   atomic.Int64

	mat matrixB

	fn     func(thread, lo, hi int) // Parallel's function; nil for a product
	fnN    int                      // Parallel's range
	fnStep int                      // Parallel's chunk size
}

func (c *Context) run(m, n, k int, a []float32, lda int, src bSource, out []float32, ldc int, ep Epilogue) error {
	if c.closed {
		return ErrClosed
	}
	if err := checkMatrix("C", m, n, out, ldc); err != nil {
		return err
	}
	if ep.Bias != nil && len(ep.Bias) < m {
		return fmt.Errorf("gemm: bias has %d values, want %d", len(ep.Bias), m)
	}
	ldr := ep.LdResidual
	if ldr == 0 {
		ldr = ldc
	}
	if ep.Residual != nil {
		if err := checkMatrix("residual", m, n, ep.Residual, ldr); err != nil {
			return err
		}
	}
	if m == 0 || n == 0 {
		return nil
	}
	flags := 0
	if ep.Bias != nil {
		flags |= flagBias
	}
	if ep.Residual != nil {
		flags |= flagResidual
	}
	if ep.ReLU {
		flags |= flagReLU
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			var bias, res []float32
			if ep.Bias != nil {
				bias = ep.Bias[i:]
			}
			if ep.Residual != nil {
				res = ep.Residual[i*ldr:]
			}
			zero := make([]float32, n)
			epilogue(zero, n, out[i*ldc:], ldc, 1, n, flags, bias, res, ldr)
		}
		return nil
	}
	j := &c.job
	j.m, j.n, j.k = m, n, k
	j.a, j.lda, j.b = a, lda, src
	j.c, j.ldc = out, ldc
	j.ep, j.ldr, j.epFlags = ep, ldr, flags
	j.plan(c.threads, c.kern.mr, c.kern.nr)
	err := c.dispatch()
	// Drop references to the caller's data.
	j.a, j.b, j.c, j.ep = nil, nil, nil, Epilogue{}
	j.mat = matrixB{}
	return err
}

// Parallel calls fn(thread, lo, hi) for disjoint ranges that cover [0, n), in chunks
// of grain values (the last may be shorter; a grain below 1 counts as 1), on
// the Context's threads, and returns when every call has returned. Threads
// take chunks in order as they become free, so chunks of unequal cost still
// keep every thread busy. thread, in [0, Threads()), names the thread that
// makes the call: no two calls with the same thread run at once, so fn can
// keep scratch memory per thread. A panic in fn is returned as an error.
func (c *Context) Parallel(n, grain int, fn func(thread, lo, hi int)) error {
	if c.closed {
		return ErrClosed
	}
	if n <= 0 {
		return nil
	}
	j := &c.job
	j.fn, j.fnN = fn, n
	j.fnStep = max(grain, 1)
	j.tasks = (n + j.fnStep - 1) / j.fnStep
	err := c.dispatch()
	j.fn = nil
	return err
}

// dispatch runs the job's tasks on the caller and as many workers as there
// are tasks, and waits for them.
func (c *Context) dispatch() error {
	j := &c.job
	j.next.Store(0)
	threads := min(c.threads, j.tasks)
	c.pending.Store(int32(threads - 1))
	c.gen.Store((c.gen.Load()/jobShift+1)*jobShift + uint64(threads))
	for _, w := range c.workers[:threads-1] {
		w.wake()
	}
	old := fault.Catch() // the caller works too: see worker
	p := c.work(0)
	fault.Restore(old)
	c.caller.wait(func() bool { return c.pending.Load() == 0 })
	for i, q := range c.panics[1:threads] {
		if q != nil && p == nil {
			p = q
		}
		c.panics[i+1] = nil
	}
	if e, ok := p.(*fault.Error); ok {
		return fmt.Errorf("gemm: %w", e)
	}
	if p != nil {
		return fmt.Errorf("gemm: worker panicked: %v", p)
	}
	return nil
}

// plan chooses the k block and the task grid. The cost model, in cycles of one
// thread: a multiply-add costs 1/16 (two 8-wide FMAs per cycle at half
// efficiency), packing one value of A 1 and of B 3; threads take tasks in
// rounds, so the cost is rounds times the cost of one task.
func (j *job) plan(threads, mr, nr int) {
	j.kc = kBlock(j.k)
	pm, pn := (j.m+mr-1)/mr, (j.n+nr-1)/nr
	j.mt, j.nt, j.tn, j.tasks = pm*mr, pn*nr, 1, 1
	if threads == 1 || j.m*j.n*j.k < 1<<16 {
		return
	}
	best := -1.0
	for tm := 1; tm <= min(pm, 4*threads); tm++ {
		mt := (pm + tm - 1) / tm // panels per task
		am := (pm + mt - 1) / mt // tasks along m
		for tn := 1; tn <= min(pn, 4*threads); tn++ {
			nt := (pn + tn - 1) / tn
			an := (pn + nt - 1) / nt
			rounds := (am*an + threads - 1) / threads
			rows, cols := float64(mt*mr), float64(nt*nr)
			apack := rows
			if j.pa != nil {
				apack = 0
			}
			cost := float64(rounds) * float64(j.k) * (rows*cols/16 + apack + 3*cols)
			if best < 0 || cost < best {
				best = cost
				j.mt, j.nt, j.tn, j.tasks = mt*mr, nt*nr, an, am*an
			}
		}
	}
}

// worker is the loop of thread id, which waits on w: it waits for each job that needs it (see
// wait.go), runs tasks until none is left, and counts itself out.
func (c *Context) worker(id int, w *sleeper) {
	defer c.wg.Done()
	// Tasks may read memory the server does not own (a client's
	// shared-memory region, read in place): a fault there is a panic that
	// work returns, not the end of the process.
	fault.Catch()
	var seen uint64 // New starts the workers before the first job
	for {
		w.wait(func() bool { return c.gen.Load() != seen })
		seen = c.gen.Load()
		if c.stop.Load() {
			return
		}
		if int(seen%jobShift) <= id {
			continue // a job of fewer threads
		}
		c.panics[id] = c.work(id)
		if c.pending.Add(-1) == 0 {
			c.caller.wake()
		}
	}
}

// work runs tasks of the current job until none is left and returns the value
// of a panic, or nil.
func (c *Context) work(id int) (p any) {
	defer func() {
		if r := recover(); r != nil {
			p = r
			if e := fault.Of(r); e != nil {
				p = e
			}
		}
	}()
	j := &c.job
	buf := c.bufs[id]
	for {
		t := int(j.next.Add(1)) - 1
		if t >= j.tasks {
			return nil
		}
		if j.fn != nil {
			lo := t * j.fnStep
			j.fn(id, lo, min(lo+j.fnStep, j.fnN))
			continue
		}
		ti, tj := t/j.tn, t%j.tn
		i0, j0 := ti*j.mt, tj*j.nt
		c.task(buf, i0, min(i0+j.mt, j.m), j0, min(j0+j.nt, j.n))
	}
}

// task computes rows i0..i1 and columns j0..j1 of C.
func (c *Context) task(buf *buffers, i0, i1, j0, j1 int) {
	j := &c.job
	mr, nr := c.kern.mr, c.kern.nr
	full := c.kern.full
	mpad := (j.m + mr - 1) / mr * mr
	for jc := j0; jc < j1; jc += ncMax {
		nc := min(ncMax, j1-jc)
		for pc := 0; pc < j.k; pc += j.kc {
			kb := min(j.kc, j.k-pc)
			j.b.pack(buf, pc, kb, jc, nc, nr)
			flags := 0
			if pc > 0 {
				flags |= flagAccumulate
			}
			if pc+kb == j.k {
				flags |= j.epFlags
			}
			for ic := i0; ic < i1; ic += mcMax {
				mb := min(mcMax, i1-ic)
				pa := buf.a
				if j.pa != nil {
					pa = j.pa[pc*mpad+ic*kb : pc*mpad+(ic+mb+mr-1)/mr*mr*kb]
				} else {
					packA(pa, j.a, j.lda, ic, mb, pc, kb, mr)
				}
				for jr := 0; jr < nc; jr += nr {
					nb := min(nr, nc-jr)
					bp := buf.b[jr*kb : jr*kb+kb*nr]
					col := jc + jr
					for ir := 0; ir < mb; ir += mr {
						ib := min(mr, mb-ir)
						ap := pa[ir*kb : ir*kb+kb*mr]
						row := ic + ir
						var bias, res []float32
						if flags&flagBias != 0 {
							bias = j.ep.Bias[row : row+ib]
						}
						if flags&flagResidual != 0 {
							res = j.ep.Residual[row*j.ldr+col:]
						}
						if ib == mr && nb == nr {
							full(kb, ap, bp, j.c[row*j.ldc+col:], j.ldc, flags, bias, res, j.ldr)
							continue
						}
						full(kb, ap, bp, buf.tile, nr, 0, nil, nil, 0)
						epilogue(buf.tile, nr, j.c[row*j.ldc+col:], j.ldc, ib, nb, flags, bias, res, j.ldr)
					}
				}
			}
		}
	}
}

// epilogue writes the rows x cols corner of tile (row stride ldt) to c (row
// stride ldc), applying flags.
func epilogue(tile []float32, ldt int, c []float32, ldc, rows, cols, flags int, bias, res []float32, ldr int) {
	for i := 0; i < rows; i++ {
		t := tile[i*ldt : i*ldt+cols]
		ci := c[i*ldc : i*ldc+cols]
		var b float32
		if flags&flagBias != 0 {
			b = bias[i]
		}
		var ri []float32
		if flags&flagResidual != 0 {
			ri = res[i*ldr : i*ldr+cols]
		}
		for jj, v := range t {
			if flags&flagAccumulate != 0 {
				v += ci[jj]
			}
			v += b
			if ri != nil {
				v += ri[jj]
			}
			if flags&flagReLU != 0 && v < 0 {
				v = 0
			}
			ci[jj] = v
		}
	}
}

// Package gemm multiplies float32 matrices for the CPU back-end: a packed,
// cache-blocked GEMM with AVX-512 (8x32 tiles) or AVX2/FMA (6x16 tiles)
// micro-kernels in assembly where the CPU has them and a portable Go kernel
// elsewhere, parallel across a fixed set of goroutines.
//
// A product C = A·B (A m x k, B k x n, all row-major) is computed in five steps:
//
//  1. the output is cut into tasks, rectangles of C whose sizes balance the
//     work across the Context's threads against the cost of packing;
//  2. each thread takes tasks in turn; for a task it walks C's columns in
//     blocks of at most NC and the k dimension in blocks of at most KC;
//  3. for each (KC x NC) block it packs B into column panels NR values wide,
//     zero-padded;
//  4. for each MC rows of the task it packs A into row panels MR values tall;
//  5. the micro-kernel multiplies one MR-row panel of A by one NR-column panel
//     of B in registers and writes the MR x NR tile of C; after the last k
//     block it also applies the epilogue (per-row bias, residual, ReLU), so
//     the output needs no further pass.
//
// Packing buffers belong to the threads and are reused, so a Context does not
// allocate in steady state.
package gemm

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/inferbench/inferbench/inference/internal/switches"
)

// ErrClosed is returned by a Context's methods after Close.
var ErrClosed = errors.New("gemm: context closed")

// Config says how a Context computes.
type Config struct {
	// Threads is the number of goroutines that compute a product, the caller's
	// included. If Threads is 0, runtime.GOMAXPROCS(0) is used.
	Threads int
	// Kernel names the micro-kernel: "generic", "avx2" or "avx512" (see
	// Kernels for those this CPU supports). If Kernel is empty,
	// the value of switches.GemmKernel (INFERBENCH_GEMM_KERNEL) is used, and if that is
	// empty too, the fastest kernel the CPU supports.
	Kernel string
}

// Kernels lists the micro-kernels this build and CPU support, fastest first.
func Kernels() []string {
	var names []string
	for _, k := range kernels() {
		names = append(names, k.name)
	}
	return names
}

// Epilogue is what a product does to each element of C after the sum:
// C[i][j] = ReLU?(sum + Bias[i] + Residual[i][j]).
type Epilogue struct {
	// Bias, if not nil, holds one value per row of C (len >= m).
	Bias []float32
	// Residual, if not nil, is an m x n matrix added element-wise after the
	// bias, with row stride LdResidual (if LdResidual is 0, C's row stride is
	// used). It must not overlap C.
	Residual   []float32
	LdResidual int
	// ReLU clamps negative results (after bias and residual) to zero.
	ReLU bool
}

// Context computes products on Threads goroutines: the caller's and
// Threads-1 workers it owns. A Context is not safe for concurrent use: one
// product runs at a time. Close stops the workers.
type Context struct {
	threads int
	every   int // pause's every for the Context's spinners (yieldEvery)
	kern    microKernel
	bufs    []*buffers // one per thread; bufs[0] is the caller's

	job job
	// gen announces a job to the workers: a count of jobs times jobShift
	// plus the number of threads that run it (the caller and workers 1 to
	// that number minus one), written by the caller alone. Workers past
	// that number leave the job alone.
	gen     atomic.Uint64
	pending atomic.Int32 // workers still running the current job
	stop    atomic.Bool  // set by Close before its last announcement
	workers []*sleeper   // worker i waits on workers[i-1]
	caller  *sleeper     // the caller waits on it for pending to reach 0
	panics  []any        // by thread: the value of a panic in the current job
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
}

// jobShift is the factor of the job count in Context.gen: the low bits hold
// the threads of the job.
const jobShift = 1 << 20

// New returns a Context with cfg's threads and kernel. The caller must Close it.
func New(cfg Config) (*Context, error) {
	threads := cfg.Threads
	if threads == 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	if threads < 1 {
		return nil, fmt.Errorf("gemm: Threads = %d, want at least 1", threads)
	}
	name := cfg.Kernel
	if name == "" {
		name = switches.GemmKernel.Value()
	}
	kern, err := findKernel(name)
	if err != nil {
		return nil, err
	}
	if threads >= jobShift {
		return nil, fmt.Errorf("gemm: Threads = %d, want fewer than %d", threads, jobShift)
	}
	c := &Context{threads: threads, every: yieldEvery(threads), kern: kern, caller: newSleeper(threads), panics: make([]any, threads)}
	for i := 0; i < threads; i++ {
		c.bufs = append(c.bufs, newBuffers(kern))
	}
	for i := 1; i < threads; i++ {
		c.workers = append(c.workers, newSleeper(threads))
	}
	c.wg.Add(threads - 1)
	for i, w := range c.workers {
		go c.worker(i+1, w)
	}
	return c, nil
}

// Threads is the number of goroutines that compute a product.
func (c *Context) Threads() int { return c.threads }

// Kernel is the name of the micro-kernel in use ("avx512", "avx2" or "generic").
func (c *Context) Kernel() string { return c.kern.name }

// Close stops the worker goroutines and waits for them. It is idempotent.
func (c *Context) Close() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.stop.Store(true)
	c.gen.Add(jobShift) // a job of no threads: the workers see stop
	for _, w := range c.workers {
		w.wake()
	}
	c.wg.Wait()
	return nil
}

// Gemm computes C = A·B followed by ep for row-major A (m x k, row stride
// lda), B (k x n, row stride ldb) and C (m x n, row stride ldc), overwriting C.
// It returns an error, and computes nothing, when a matrix is too short for
// its shape; ErrClosed after Close.
func (c *Context) Gemm(m, n, k int, a []float32, lda int, b []float32, ldb int, out []float32, ldc int, ep Epilogue) error {
	if err := checkMatrix("A", m, k, a, lda); err != nil {
		return err
	}
	if err := checkMatrix("B", k, n, b, ldb); err != nil {
		return err
	}
	src := &c.job.mat
	*src = matrixB{b: b, ldb: ldb}
	return c.run(m, n, k, a, lda, src, out, ldc, ep)
}

func checkMatrix(name string, rows, cols int, v []float32, ld int) error {
	if rows < 0 || cols < 0 {
		return fmt.Errorf("gemm: %s is %d x %d", name, rows, cols)
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	if ld < cols {
		return fmt.Errorf("gemm: %s row stride %d, want at least %d", name, ld, cols)
	}
	if need := (rows-1)*ld + cols; len(v) < need {
		return fmt.Errorf("gemm: %s has %d values, want at least %d for %d x %d with stride %d", name, len(v), need, rows, cols, ld)
	}
	return nil
}

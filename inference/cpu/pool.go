package cpu

import (
	"sync"

	"github.com/inferbench/inferbench/inference/internal/gemm"
)

// pool is the engine's compute threads: a gemm.Context (the calling goroutine
// and n-1 goroutines it owns) that the workers share one image at a time.
type pool struct {
	n   int
	mu  sync.Mutex // held for a whole forward pass
	ctx *gemm.Context
}

// newPool returns a pool of n threads (at least 1). The environment may name
// the GEMM kernel (gemm.KernelEnv); one this CPU lacks makes compile fail
// before the pool is made, and falls back to the portable kernel here.
func newPool(n int) *pool {
	n = max(n, 1)
	ctx, err := gemm.New(gemm.Config{Threads: n})
	if err != nil {
		ctx, _ = gemm.New(gemm.Config{Threads: n, Kernel: "generic"})
	}
	return &pool{n: n, ctx: ctx}
}

// close stops the threads.
func (p *pool) close() { _ = p.ctx.Close() }

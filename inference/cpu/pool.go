package cpu

import (
	"fmt"
	"sync"

	"github.com/inferbench/inferbench/inference/internal/cpu/gemm"
)

// pool is the engine's compute threads: a gemm.Context (the calling goroutine
// and n-1 goroutines it owns) that the workers share one forward pass at a
// time.
type pool struct {
	n   int
	mu  sync.Mutex // held for a whole forward pass
	ctx *gemm.Context
}

// newPool returns a pool of n threads (at least 1) running the kernel family
// that the environment names (switches.GemmKernel), or the fastest this CPU has.
// A family this CPU lacks is an error.
func newPool(n int) (*pool, error) {
	n = max(n, 1)
	ctx, err := gemm.New(gemm.Config{Threads: n})
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	return &pool{n: n, ctx: ctx}, nil
}

// close stops the threads.
func (p *pool) close() error { return p.ctx.Close() }

//go:build !linux

package gemm

// osYield does nothing where sched_yield is not at hand: a spinning
// goroutine still yields to other goroutines (runtime.Gosched).
func osYield() {}

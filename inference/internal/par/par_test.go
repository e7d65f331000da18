package par

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDoCallsEachIndexOnce checks that every index runs exactly once, for
// no pieces, one, fewer than the CPUs and many more.
func TestDoCallsEachIndexOnce(t *testing.T) {
	for _, n := range []int{0, 1, 3, 1000} {
		calls := make([]atomic.Int32, n)
		Do(n, func(i int) { calls[i].Add(1) })
		for i := range calls {
			assert.Equal(t, int32(1), calls[i].Load(), "n=%d index %d", n, i)
		}
	}
}

// TestDoRunsOnOneGoroutineWithOneCPU checks the sequential path: with
// GOMAXPROCS 1 the pieces run in order.
func TestDoRunsOnOneGoroutineWithOneCPU(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var order []int
	Do(5, func(i int) { order = append(order, i) })
	assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
}

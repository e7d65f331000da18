// Package par runs independent pieces of work on all CPUs.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Do calls f(0) to f(n-1) on up to GOMAXPROCS goroutines, each taking the
// next index as it finishes one (so pieces of uneven size share out), and
// returns when all have returned. With one piece or one CPU it calls f on
// the caller's goroutine.
func Do(n int, f func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

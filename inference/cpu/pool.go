package cpu

import "sync"

// pool runs a range of work split across a fixed set of goroutines that it owns.
type pool struct {
	n     int
	tasks chan task
	wg    sync.WaitGroup
}

type task struct {
	fn     func(lo, hi int)
	lo, hi int
	done   *sync.WaitGroup
}

func newPool(n int) *pool {
	p := &pool{n: max(n, 1), tasks: make(chan task)}
	for i := 0; i < p.n-1; i++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for t := range p.tasks {
				t.fn(t.lo, t.hi)
				t.done.Done()
			}
		}()
	}
	return p
}

// run calls fn over [0, n) split into one chunk per goroutine, the caller's included,
// and returns when every chunk is done. Chunks are multiples of 16 where possible.
func (p *pool) run(n int, fn func(lo, hi int)) {
	parts := p.n
	if n < 64*parts {
		parts = max(1, n/64)
	}
	if parts == 1 {
		fn(0, n)
		return
	}
	chunk := (n + parts - 1) / parts
	chunk = (chunk + 15) &^ 15
	var done sync.WaitGroup
	lo := chunk
	for ; lo < n; lo += chunk {
		done.Add(1)
		p.tasks <- task{fn: fn, lo: lo, hi: min(lo+chunk, n), done: &done}
	}
	fn(0, min(chunk, n))
	done.Wait()
}

func (p *pool) close() {
	close(p.tasks)
	p.wg.Wait()
}

package cuda

import "sync"

// chunk is the size in float32 values (1 MiB) of the pieces a large copy is
// split into.
const chunk = 1 << 18

// copyJob is one piece of a staging copy.
type copyJob struct {
	dst, src []float32
	wg       *sync.WaitGroup
}

// copier copies large host buffers with several goroutines, which it owns and
// waits for in close.
type copier struct {
	jobs chan copyJob
	done sync.WaitGroup
	n    int
}

func newCopier(n int) *copier {
	c := &copier{jobs: make(chan copyJob, 4*n), n: n}
	for range n {
		c.done.Add(1)
		go func() {
			defer c.done.Done()
			for j := range c.jobs {
				copy(j.dst, j.src)
				j.wg.Done()
			}
		}()
	}
	return c
}

// minJob is the fewest float32 values (64 KiB) handed to a copier goroutine:
// smaller copies are done by the caller.
const minJob = 1 << 14

// copy starts copying src to dst (same length) and counts the work in wg; the
// caller waits on wg before using dst. A large copy is split over the
// goroutines; many mid-sized ones (one image each, say) run in parallel as
// separate jobs.
func (c *copier) copy(dst, src []float32, wg *sync.WaitGroup) {
	if len(src) < minJob || c.n < 2 {
		copy(dst, src)
		return
	}
	// One piece per goroutine, at least chunk values each.
	pieces := max(1, min(c.n, len(src)/chunk))
	size := (len(src) + pieces - 1) / pieces
	for lo := 0; lo < len(src); lo += size {
		hi := min(lo+size, len(src))
		wg.Add(1)
		c.jobs <- copyJob{dst: dst[lo:hi], src: src[lo:hi], wg: wg}
	}
}

// close stops the goroutines and waits for them.
func (c *copier) close() {
	close(c.jobs)
	c.done.Wait()
}

package cuda

import (
	"sync"
	"unsafe"

	"github.com/inferbench/inferbench/inference/internal/fault"
)

// chunk is the size in float32 values (1 MiB) of the pieces a large copy is
// split into.
const chunk = 1 << 18

// copyJob is one piece of a staging copy.
type copyJob struct {
	dst, src []byte
	wg       *copyGroup
}

// copyGroup counts copies in progress, as a sync.WaitGroup, and keeps the
// first error one of them met: a memory fault reading the source (a
// client's shared-memory region whose object shrank), which the copier's
// goroutines turn into an error instead of a crash.
type copyGroup struct {
	sync.WaitGroup
	mu  sync.Mutex
	err error
}

// fail records err, if it is the first.
func (g *copyGroup) fail(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
}

// wait waits for the copies and returns the first error, clearing it.
func (g *copyGroup) wait() error {
	g.Wait()
	g.mu.Lock()
	err := g.err
	g.err = nil
	g.mu.Unlock()
	return err
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
				if err := fault.Copy(j.dst, j.src); err != nil {
					j.wg.fail(err)
				}
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
// caller waits on wg (wait, which returns a fault a copy met) before using
// dst. A large copy is split over the
// goroutines; many mid-sized ones (one image each, say) run in parallel as
// separate jobs.
func (c *copier) copy(dst, src []float32, wg *copyGroup) {
	c.copyBytes(asBytes(dst), asBytes(src), wg)
}

// copyBytes is copy for any memory, as bytes.
func (c *copier) copyBytes(dst, src []byte, wg *copyGroup) {
	if len(src) < 4*minJob || c.n < 2 {
		copy(dst, src)
		return
	}
	// One piece per goroutine, at least chunk float32 values (1 MiB) each.
	pieces := max(1, min(c.n, len(src)/(4*chunk)))
	size := (len(src) + pieces - 1) / pieces
	for lo := 0; lo < len(src); lo += size {
		hi := min(lo+size, len(src))
		wg.Add(1)
		c.jobs <- copyJob{dst: dst[lo:hi], src: src[lo:hi], wg: wg}
	}
}

// asBytes is the memory of v as bytes.
func asBytes[T float32 | uint8](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*int(unsafe.Sizeof(zero)))
}

// close stops the goroutines and waits for them.
func (c *copier) close() {
	close(c.jobs)
	c.done.Wait()
}

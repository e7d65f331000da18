package cuda

import (
	"fmt"
	"unsafe"
)

// runKind says where the values of a pending run come from.
type runKind int

const (
	noRun     runKind = iota
	stagedRun         // the slot's pinned staging buffer, filled by the copier
	directRun         // the caller's own memory (pinned, or left to the driver to stage)
)

// inputCopy enqueues the host-to-device copies of one CopyIn. The batch is the
// concatenation of the caller's parts; the device input holds it from offset 0
// in the same order. Consecutive parts that take the same route are merged into
// one run and sent with one copy:
//
//   - staged parts are copied (by the copier's goroutines) into the staging
//     buffer at the offset they will have on the device; a staged run is the
//     range [from, off) of that buffer;
//   - direct parts are sent from the caller's memory; a direct run is a range
//     of the caller's memory that is contiguous (each part starts where the
//     previous one ended) and holds device values [from, off).
//
// Why the device input ends up right:
//
//  1. Every value is sent once, to its own offset: add advances off by each
//     part's length and extends or starts the pending run, which always ends at
//     off; flush sends the pending run [from, off) and clears it; a run is
//     flushed before a run of the other kind starts and once at the end
//     (finish). So the runs tile [0, total) without overlap.
//  2. A staged run is sent only after the staging copies are done: flush waits
//     for the slot's WaitGroup, which counts every staging copy started so far
//     (this run's and, already finished, earlier ones').
//  3. Nothing overwrites a range of the staging buffer while a copy reads it:
//     within one CopyIn the staged ranges are disjoint (item 1), and the
//     backend.Worker contract keeps the next CopyIn of this slot until Wait has
//     returned, after the copy-in stream passed every copy.
//  4. A direct run is merged only when the next part starts at the run's end in
//     host memory, so one copy of its length reads exactly those parts.
//  5. The caller's memory is read by the copier only until flush or finish has
//     waited for it, which every CopyIn does before it returns, also on error
//     (finish, deferred); direct parts are read by the device until the copy
//     completes, which the contract covers (parts unchanged until Wait).
//
// T is the element type of the input: float32 values, or uint8 image bytes
// that the device normalises (Worker.CopyInUint8); offsets and lengths count
// elements.
type inputCopy[T float32 | uint8] struct {
	// send enqueues the copy of n values at src to the device input at value
	// offset off (on a GPU: cuMemcpyHtoDAsync on the copy-in stream).
	send    func(off int, src unsafe.Pointer, n int) error
	stage   []T        // the staging buffer, as long as the device input
	staging *copyGroup // counts copies into stage in progress
	copier  *copier

	off  int            // values of the batch handled so far
	kind runKind        // the pending run, covering device values [from, off)
	from int            // where the pending run starts
	src  unsafe.Pointer // directRun: the caller's memory holding values [from, off)
}

// add routes part p: direct (memory from AllocHost, or any memory when the
// engine has no staging buffers because of Options.PinnedInput: the driver
// then stages pageable memory itself) or staged.
func (c *inputCopy[T]) add(p []T, direct bool) error {
	if len(p) == 0 {
		return nil
	}
	if direct {
		src := unsafe.Pointer(&p[0])
		adjacent := c.kind == directRun && uintptr(src) == uintptr(c.src)+unsafe.Sizeof(p[0])*uintptr(c.off-c.from)
		if !adjacent {
			if err := c.flush(); err != nil {
				return err
			}
			c.kind, c.from, c.src = directRun, c.off, src
		}
	} else {
		if c.kind != stagedRun {
			if err := c.flush(); err != nil {
				return err
			}
			c.kind, c.from = stagedRun, c.off
		}
		c.copier.copyBytes(asBytes(c.stage[c.off:c.off+len(p)]), asBytes(p), c.staging)
	}
	c.off += len(p)
	return nil
}

// flush sends the pending run, if any, with one copy.
func (c *inputCopy[T]) flush() error {
	kind := c.kind
	c.kind = noRun
	switch kind {
	case stagedRun:
		if err := c.staging.wait(); err != nil {
			return fmt.Errorf("staging the input: %w", err)
		}
		return c.send(c.from, unsafe.Pointer(&c.stage[c.from]), c.off-c.from)
	case directRun:
		return c.send(c.from, c.src, c.off-c.from)
	}
	return nil
}

// finish waits for staging copies still running, so that none reads the
// caller's memory or writes the staging buffer after CopyIn returns.
func (c *inputCopy[T]) finish() { c.staging.wait() }

//go:build cuda && linux && cgo

package cuda

import (
	"errors"

	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
)

// The shortcut beside conv1. In a block that changes shape, the shortcut
// convolution (1x1, stride 2) and conv1 both read the block's input and
// nothing else of each other: conv2 needs both. At small batches each is a
// few microseconds of a GPU far from full, so while the worker records its
// CUDA graphs it puts each shortcut on a side stream that forks from the
// compute stream before conv1 and joins it before conv2, and the graph runs
// the two as parallel branches. The two share the workspace: conv1 takes its
// first part, the shortcut the part after it (besideWorkspace sizes it).
// Passes not recorded into a graph (Graphs off, the algorithm search, the
// profiler's step times) keep one stream, and so do batches of besideMaxBatch
// images or more, which fill the GPU and gain nothing from a second stream.

// besideMaxBatch is the smallest batch whose graph keeps the shortcut on the
// compute stream.
const besideMaxBatch = 32

// besideWorkspace is the workspace p's blocks need to run their shortcut
// beside conv1: the largest conv1 part plus shortcut part, or 0 for a batch
// that keeps them on one stream.
func (p *plan) besideWorkspace(net *network) uintptr {
	var ws uintptr
	if p.n >= besideMaxBatch {
		return 0
	}
	for _, b := range net.blocks {
		if b.down == nil {
			continue
		}
		c1, cd := &p.convs[b.conv1.index], &p.convs[b.down.index]
		ws = max(ws, besideOffset(c1.ws)+cd.ws)
	}
	return ws
}

// beside holds what a worker needs to record a shortcut beside conv1: the
// side stream and the events that fork it from the compute stream and join
// it back. The zero value records nothing beside.
type beside struct {
	side       cudadrv.Stream
	fork, join cudadrv.Event
	on         bool // recording a graph: enqueue shortcuts beside
}

// makeBeside makes the side stream and its events.
func (w *worker) makeBeside() error {
	if !w.beside.side.IsZero() {
		return nil
	}
	var err error
	if w.beside.side, err = cudadrv.NewStream(); err != nil {
		return err
	}
	if w.beside.fork, err = cudadrv.NewEvent(); err != nil {
		return err
	}
	w.beside.join, err = cudadrv.NewEvent()
	return err
}

// destroyBeside frees what makeBeside made.
func (w *worker) destroyBeside() error {
	b := &w.beside
	var errs []error
	for _, e := range []cudadrv.Event{b.fork, b.join} {
		if !e.IsZero() {
			errs = append(errs, e.Destroy())
		}
	}
	if !b.side.IsZero() {
		errs = append(errs, b.side.Synchronize(), b.side.Destroy())
	}
	*b = beside{}
	return errors.Join(errs...)
}

// shortcutBeside enqueues block b's shortcut from x to short on the side
// stream, forked from the compute stream, when the worker is recording a
// graph with legacy convolutions and the two parts fit in the workspace; the
// caller then enqueues conv1 and calls joinBeside before conv2. It reports
// whether it did.
func (w *worker) shortcutBeside(p *plan, b blockLayers, x, short uintptr) (bool, error) {
	if !w.beside.on || w.prof != nil || p.n >= besideMaxBatch {
		return false, nil
	}
	c1, cd := &p.convs[b.conv1.index], &p.convs[b.down.index]
	off := besideOffset(c1.ws)
	if c1.graph != nil || cd.graph != nil || off+cd.ws > w.wsSize {
		return false, nil
	}
	s := &w.beside
	if err := errors.Join(s.fork.Record(w.comp), s.side.WaitEvent(s.fork)); err != nil {
		return false, err
	}
	if err := w.dnn.SetStream(s.side.Pointer()); err != nil {
		return false, err
	}
	err := w.legacyConv(b.down, cd, choice{algo: cd.algo, fused: cd.fused}, x, short, 0, w.ws+off, w.wsSize-off)
	if serr := w.dnn.SetStream(w.comp.Pointer()); serr != nil {
		return false, errors.Join(err, serr)
	}
	if err != nil {
		return false, err
	}
	return true, s.join.Record(s.side)
}

// joinBeside makes the compute stream wait for the shortcut enqueued beside.
func (w *worker) joinBeside() error { return w.comp.WaitEvent(w.beside.join) }

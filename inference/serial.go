package inference

import (
	"errors"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/trace"
)

// serialWorker runs one backend.Worker on one goroutine: each batch is copied
// in, computed, copied out and waited for on slot 0 before the next is taken.
type serialWorker struct {
	*lane
}

// run serves batches until the server closes or the worker leaves service
// (its device is lost, or it cannot be bound). The caller added it to
// Server.goroutines.
func (w serialWorker) run() {
	defer w.s.goroutines.Done()
	release, err := w.bind()
	if err != nil {
		w.s.outOfService(w.id, err)
		return
	}
	defer release()
	for {
		b := w.next(nil)
		if b == nil {
			return
		}
		if !w.begin(b) {
			continue
		}
		if err := w.runBatch(b); err != nil {
			// Out of service first, as overlapWorker.step: a caller told of
			// the loss finds the server's readiness already counting it.
			lost := errors.Is(err, backend.ErrDeviceLost)
			if lost {
				w.s.outOfService(w.id, err)
			}
			w.fail(b, err)
			if lost {
				return
			}
			continue
		}
		w.deliver(b)
	}
}

// runBatch runs the four steps of b on slot 0, timing each on the wall clock.
func (w serialWorker) runBatch(b *batch) error {
	t0 := time.Now()
	if err := guard("copy-in", func() error { return b.startCopyIn(w.w, 0) }); err != nil {
		return err
	}
	t1 := time.Now()
	if err := guard("compute", func() error { return w.w.Compute(0, b.n) }); err != nil {
		return err
	}
	t2 := time.Now()
	if err := guard("copy-out", func() error { return b.startCopyOut(w.w, 0) }); err != nil {
		return err
	}
	err := guard("wait", func() (err error) { b.times, err = w.w.Wait(0); return err })
	b.copyIn, b.compute, b.copyOut = trace.Span{Start: t0, End: t1}, trace.Span{Start: t1, End: t2}, trace.Span{Start: t2, End: time.Now()}
	return err
}

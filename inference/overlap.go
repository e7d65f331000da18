package inference

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/trace"
)

// overlapWorker runs one backend.Worker as a pipeline of three stage
// goroutines, so that the copies of one batch overlap the compute of another:
//
//	copyInStage --toCompute--> computeStage --toCopyOut--> copyOutStage
//	     ^                                                      |
//	     +--------------------------- free <--------------------+
//
// Two kinds of token order the stages:
//
//   - A slotToken (on free; Slots() of them) is the right to use one slot.
//     copyInStage takes one before it takes a batch; it goes back to free
//     when the slot's batch is done with: after its Wait returned
//     (copyOutStage), or where the batch failed or was dropped. So no slot is
//     copied into before its previous batch's Wait returned (backend.Worker's
//     rule) and at most Slots() batches are in flight.
//   - The stagePermit (staged holds at most one) is the right to have a
//     copied-in batch waiting for compute. copyInStage acquires it (sends)
//     before it takes a batch from the server; computeStage releases it
//     (receives) when it starts computing that batch, or copyInStage does when
//     the batch was dropped or failed to copy in. So a worker takes its next
//     request from the shared queue only once its previous one is computing:
//     copies still overlap compute, but one worker cannot hoard queued
//     requests in its slots while another worker sits idle.
//
// dead is closed once, when the worker leaves service (its device is lost or
// a stage cannot be bound): no stage calls the back-end after that.
// copyInStage gives a batch it has just taken back to the queue and returns,
// closing toCompute; the later stages fail the batches still in the pipeline
// and return when their input channel closes. Every batch a stage receives is
// answered by that stage or passed on.
type overlapWorker struct {
	*lane
	free      chan slotToken   // capacity Slots(): never blocks a sender
	staged    chan stagePermit // capacity 1: a send acquires, a receive releases
	toCompute chan *batch      // capacity Slots(): never blocks a sender
	toCopyOut chan *batch      // capacity Slots(): never blocks a sender
	dead      chan struct{}
	deadOnce  sync.Once
}

// slotToken is a slot index; holding it is the right to use that slot.
type slotToken int

// stagePermit is the right to have one copied-in batch waiting for compute.
type stagePermit struct{}

func newOverlapWorker(l *lane) *overlapWorker {
	n := l.w.Slots()
	o := &overlapWorker{
		lane: l,
		free: make(chan slotToken, n), staged: make(chan stagePermit, 1),
		toCompute: make(chan *batch, n), toCopyOut: make(chan *batch, n),
		dead: make(chan struct{}),
	}
	for i := range n {
		o.free <- slotToken(i)
	}
	return o
}

// start runs the three stages on goroutines owned by Server.goroutines.
func (o *overlapWorker) start() {
	o.s.goroutines.Add(3)
	go o.copyInStage()
	go o.computeStage()
	go o.copyOutStage()
}

// copyInStage takes a slot, the staging permit and a batch, copies the batch
// in and passes it to computeStage.
func (o *overlapWorker) copyInStage() {
	defer o.s.goroutines.Done()
	defer close(o.toCompute)
	defer o.bindStage()()
	for {
		var slot slotToken
		select {
		case slot = <-o.free:
		case <-o.dead:
			return
		}
		select {
		case o.staged <- stagePermit{}:
		case <-o.dead:
			return
		}
		b := o.next(o.dead)
		if b == nil {
			return
		}
		if o.isDead() {
			o.requeue(b, fmt.Errorf("%w: worker %d", backend.ErrDeviceLost, o.id))
			return
		}
		if !o.begin(b) {
			o.unstage(slot)
			continue
		}
		b.slot = int(slot)
		t0 := time.Now()
		if !o.step(b, "copy-in", func() error { return b.startCopyIn(o.w, int(slot)) }) {
			o.unstage(slot)
			continue
		}
		b.copyIn = trace.Span{Start: t0, End: time.Now()}
		o.toCompute <- b
	}
}

// unstage gives back the permit and slot of a batch that will not be computed.
func (o *overlapWorker) unstage(slot slotToken) {
	<-o.staged
	o.free <- slot
}

// computeStage releases the staging permit of each batch it receives, runs
// the forward pass and passes the batch to copyOutStage.
func (o *overlapWorker) computeStage() {
	defer o.s.goroutines.Done()
	defer close(o.toCopyOut)
	defer o.bindStage()()
	for b := range o.toCompute {
		<-o.staged // b leaves the staging area: copyInStage may take the next request
		slot := slotToken(b.slot)
		t0 := time.Now()
		if !o.step(b, "compute", func() error { return o.w.Compute(int(slot), b.n) }) {
			o.free <- slot
			continue
		}
		b.compute = trace.Span{Start: t0, End: time.Now()}
		o.toCopyOut <- b
	}
}

// copyOutStage copies each batch's logits out, waits for them, delivers them
// and returns the batch's slot.
func (o *overlapWorker) copyOutStage() {
	defer o.s.goroutines.Done()
	defer o.bindStage()()
	for b := range o.toCopyOut {
		slot := slotToken(b.slot)
		t0 := time.Now()
		if o.step(b, "copy-out", func() error { return b.startCopyOut(o.w, int(slot)) }) &&
			o.step(b, "wait", func() (err error) { b.times, err = o.w.Wait(int(slot)); return err }) {
			b.copyOut = trace.Span{Start: t0, End: time.Now()}
			o.deliver(b)
		}
		o.free <- slot
	}
}

// bindStage binds the calling stage goroutine to the worker and returns the
// function that undoes it. If binding fails, the worker leaves service (the
// stage then only fails what reaches it) and the function does nothing.
func (o *overlapWorker) bindStage() (release func()) {
	release, err := o.bind()
	if err != nil {
		o.die(err)
		return func() {}
	}
	return release
}

// step runs one back-end step of b. On failure it takes the worker out of
// service if the device is lost, then answers b's calls with the error (so
// a caller told of the loss finds the server's readiness already counting
// it), and returns false; after the worker left service it fails b without
// calling the back-end.
func (o *overlapWorker) step(b *batch, name string, f func() error) bool {
	if o.isDead() {
		o.fail(b, fmt.Errorf("%s: %w", name, backend.ErrDeviceLost))
		return false
	}
	if err := guard(name, f); err != nil {
		if errors.Is(err, backend.ErrDeviceLost) {
			o.die(err)
		}
		o.fail(b, err)
		return false
	}
	return true
}

// die takes the worker out of service for err and closes dead, once.
func (o *overlapWorker) die(err error) {
	o.deadOnce.Do(func() {
		o.s.outOfService(o.id, err)
		close(o.dead)
	})
}

func (o *overlapWorker) isDead() bool { return closed(o.dead) }

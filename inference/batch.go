package inference

import (
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/trace"
)

// batch is the unit of work of a worker: one or more calls run together.
type batch struct {
	calls []*Call
	parts [][]float32 // the calls' inputs, in order: what CopyIn reads
	bytes [][]uint8   // the same for uint8 calls: what CopyInUint8 reads
	uint8 bool        // the calls are uint8 (a batch holds one datatype)
	// devs are the inputs of calls in device memory: what CopyInDevice
	// reads (a batch's inputs are all in device memory or all in host
	// memory).
	devs   []backend.DeviceMemory
	device bool
	outs   []backend.DeviceOutput // where the calls with device logits want them
	n      int                    // images
	slot   int                    // the worker slot it runs in

	started time.Time
	// Wall-clock stage spans; copy-out includes the wait for the logits.
	copyIn, compute, copyOut trace.Span
	times                    backend.Times
	traced                   []trace.Request // reused by lane.trace
}

// add appends c to b.
func (b *batch) add(c *Call) {
	b.calls = append(b.calls, c)
	b.uint8, b.device = c.isUint8(), !c.dev.IsZero()
	switch {
	case b.device:
		b.devs = append(b.devs, c.dev)
	case b.uint8:
		b.bytes = append(b.bytes, c.bytes)
	default:
		b.parts = append(b.parts, c.in)
	}
	if !c.devOut.IsZero() {
		b.outs = append(b.outs, backend.DeviceOutput{First: b.n, Mem: c.devOut})
	}
	b.n += c.n
}

// isUint8 reports whether c's input is uint8 bytes for the back-end.
func (c *Call) isUint8() bool { return c.bytes != nil || c.devUint8 }

// fits reports whether c may join b: same datatype and the same memory
// (CopyIn, CopyInUint8 and CopyInDevice each take one).
func (b *batch) fits(c *Call) bool {
	return len(b.calls) == 0 || (c.isUint8() == b.uint8 && c.dev.IsZero() != b.device)
}

// startCopyIn starts b's copy-in into slot of w: CopyInDevice for inputs in
// device memory, CopyInUint8 for uint8 batches, CopyIn otherwise (the server
// admits uint8 and device calls only when w is a Uint8Worker or a
// DeviceWorker).
func (b *batch) startCopyIn(w backend.Worker, slot int) error {
	switch {
	case b.device:
		return w.(backend.DeviceWorker).CopyInDevice(slot, b.devs, b.uint8)
	case b.uint8:
		return w.(backend.Uint8Worker).CopyInUint8(slot, b.bytes)
	}
	return w.CopyIn(slot, b.parts)
}

// startCopyOut starts b's copy-out from slot of w: CopyOutDevice when a call
// wants its logits in device memory (then to the host too only when a call
// wants them there), CopyOut otherwise.
func (b *batch) startCopyOut(w backend.Worker, slot int) error {
	if len(b.outs) > 0 {
		return w.(backend.DeviceWorker).CopyOutDevice(slot, b.n, b.outs, len(b.outs) < len(b.calls))
	}
	return w.CopyOut(slot, b.n)
}

// keep keeps the calls for which f is true (in order) and recomputes parts
// and n, and reports whether any call is left.
func (b *batch) keep(f func(c *Call) bool) bool {
	kept := b.calls[:0]
	for _, c := range b.calls {
		if f(c) {
			kept = append(kept, c)
		}
	}
	if len(kept) != len(b.calls) {
		clear(b.calls[len(kept):])
		clear(b.parts)
		clear(b.bytes)
		// add writes call i back where it was read from: kept is b.calls.
		b.calls, b.parts, b.bytes, b.devs, b.outs, b.n = b.calls[:0], b.parts[:0], b.bytes[:0], b.devs[:0], b.outs[:0], 0
		for _, c := range kept {
			b.add(c)
		}
	}
	return len(kept) > 0
}

// doneReading tells every call of b that the server no longer reads its input.
func (b *batch) doneReading() {
	for _, c := range b.calls {
		c.reading.Done()
	}
}

// batchPool recycles batches (and their slices) between requests.
type batchPool struct{ p sync.Pool }

func (p *batchPool) get() *batch {
	if b, ok := p.p.Get().(*batch); ok {
		return b
	}
	return &batch{}
}

func (p *batchPool) put(b *batch) {
	clear(b.calls)
	clear(b.parts)
	clear(b.bytes)
	*b = batch{calls: b.calls[:0], parts: b.parts[:0], bytes: b.bytes[:0], devs: b.devs[:0], outs: b.outs[:0], traced: b.traced[:0]}
	p.p.Put(b)
}

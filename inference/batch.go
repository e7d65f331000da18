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
	n     int         // images
	slot  int         // the worker slot it runs in

	started time.Time
	// Wall-clock stage spans; copy-out includes the wait for the logits.
	copyIn, compute, copyOut trace.Span
	times                    backend.Times
	traced                   []trace.Request // reused by lane.trace
}

// add appends c to b.
func (b *batch) add(c *Call) {
	b.calls = append(b.calls, c)
	b.parts = append(b.parts, c.in)
	b.n += c.n
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
		b.calls = kept
		clear(b.parts)
		b.parts, b.n = b.parts[:0], 0
		for _, c := range kept {
			b.parts = append(b.parts, c.in)
			b.n += c.n
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
	*b = batch{calls: b.calls[:0], parts: b.parts[:0], traced: b.traced[:0]}
	p.p.Put(b)
}

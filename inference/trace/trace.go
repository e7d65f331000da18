// Package trace records the timeline of every batch the server runs and writes
// it in the Chrome trace event format, which https://ui.perfetto.dev and
// chrome://tracing open unchanged.
//
// Recording and writing are separate, so the request path pays only for a copy:
//
//  1. A worker calls Recorder.Batch once per executed batch with the batch's
//     requests and the times of its stages. Batch copies what it keeps into
//     chunked storage under a mutex and never formats anything.
//  2. WriteJSON (or WriteFile) turns the recorded batches into spans: each
//     request's queue wait, and per batch the copy-in, compute, copy-out and
//     delivery. Device-timed batches get their GPU spans laid out backwards from
//     the end of the copy-out (see Batch).
//  3. The spans are placed on tracks: one process per device ("cpu", "gpu 0"),
//     one thread per worker stream ("worker 0 h2d", "worker 0 compute",
//     "worker 0 d2h", "worker 0 deliver") and "queue" threads for the waits.
//     Spans that overlap on one track are spread over extra lanes
//     ("queue #2", ...), because the format draws overlapping complete
//     events on one thread wrongly.
//  4. Every span becomes a complete event ("ph":"X") with microsecond ts/dur
//     relative to the earliest span, and every process and thread gets its
//     name as a metadata event ("ph":"M").
package trace

import (
	"sync"
	"time"
)

// CPU is the Device of a batch that ran on the host; its process is named
// "cpu". Other values are GPU ordinals, named "gpu N".
const CPU = -1

// Span is a wall-clock interval. A Span whose Start is the zero time is absent.
type Span struct{ Start, End time.Time }

// Request is one caller's request within a batch.
type Request struct {
	ID       uint64
	Images   int       // images in the request
	Sent     time.Time // intended send time (the schedule's, for open-loop load)
	Admitted time.Time // when the server queued it
}

// Batch is one executed batch: the requests a worker ran together and when
// each stage ran.
//
// The wall-clock spans are when the host issued (on a GPU) or ran (on the
// CPU) each stage. When DeviceTimed is set, the GPU spans are drawn instead on
// the stream tracks with the device-measured durations, laid out backwards from
// CopyOut.End: the d2h span ends at CopyOut.End, compute ends where d2h starts
// and h2d ends where compute starts. Those spans never start before
// CopyIn.Start (the device cannot start a copy the host has not issued); a
// span that would is clipped, and its event keeps the measured duration in
// its args.
type Batch struct {
	Worker   int // worker index within the device
	Device   int // GPU ordinal, or CPU
	Requests []Request
	// Started is when the worker took the batch: each request's queue wait
	// is Started - Admitted.
	Started                  time.Time
	CopyIn, Compute, CopyOut Span      // wall-clock: when the host issued/ran each stage
	Delivered                time.Time // responses handed to callers

	// DeviceTimed says H2D, ComputeDev and D2H hold durations measured on the
	// device (GPU events).
	DeviceTimed          bool
	H2D, ComputeDev, D2H time.Duration
}

// chunk sizes of the Recorder's storage: appending never copies what is
// already recorded, so Batch's cost does not grow with the trace.
const (
	batchChunk   = 256
	requestChunk = 4096
)

// A Recorder collects batch timelines. It is safe for concurrent use. The
// zero value is not ready: use New. The methods of a nil *Recorder do nothing,
// so a server may call them unconditionally.
//
// A Recorder keeps every batch until Reset; it needs about 150 bytes per batch
// and 40 bytes per request.
type Recorder struct {
	mu       sync.Mutex
	batches  [][]Batch   // full chunks, then the current one
	requests [][]Request // same
	n        int
}

// New returns an empty Recorder.
func New() *Recorder {
	return &Recorder{}
}

// Batch records one executed batch. It copies b and its Requests, so the
// caller may reuse both once Batch returns.
func (r *Recorder) Batch(b *Batch) {
	if r == nil || b == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs := r.keepRequests(b.Requests)
	last := len(r.batches) - 1
	if last < 0 || len(r.batches[last]) == cap(r.batches[last]) {
		r.batches = append(r.batches, make([]Batch, 0, batchChunk))
		last++
	}
	r.batches[last] = append(r.batches[last], *b)
	r.batches[last][len(r.batches[last])-1].Requests = reqs
	r.n++
}

// keepRequests copies reqs into the current request chunk, starting a new one
// when it does not fit, and returns the copy. r.mu is held.
func (r *Recorder) keepRequests(reqs []Request) []Request {
	if len(reqs) == 0 {
		return nil
	}
	last := len(r.requests) - 1
	if last < 0 || cap(r.requests[last])-len(r.requests[last]) < len(reqs) {
		r.requests = append(r.requests, make([]Request, 0, max(requestChunk, len(reqs))))
		last++
	}
	c := r.requests[last]
	n := len(c)
	c = append(c, reqs...)
	r.requests[last] = c
	// Full slice expression: a later append to the chunk cannot reach it.
	return c[n:len(c):len(c)]
}

// Len returns the number of batches recorded.
func (r *Recorder) Len() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Reset forgets every recorded batch.
func (r *Recorder) Reset() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches, r.requests, r.n = nil, nil, 0
}

// snapshot returns the recorded batches in the order they were recorded. The
// batches are shared with the Recorder, which never changes them.
func (r *Recorder) snapshot() []Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Batch, 0, r.n)
	for _, c := range r.batches {
		out = append(out, c...)
	}
	return out
}

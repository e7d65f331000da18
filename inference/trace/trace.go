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
	"math"
	"slices"
	"sync"
	"time"
)

// CPU is the Device of a batch that ran on the host; its process is named
// "cpu". Other values are GPU ordinals, named "gpu N".
const CPU = -1

// Span is a wall-clock interval. A Span with a zero Start or End is absent.
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
// and h2d ends where compute starts. As a stream runs one stage at a time, a
// span also ends no later than the same worker's span of the next batch on
// that stream starts (the host sees a copy-out finish a little after it did,
// and by a different delay each time). The spans never start before
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

// absent marks a time that was the zero time.
const absent = math.MinInt64

// record is a Batch as the Recorder keeps it: times in Unix nanoseconds
// (absent when zero; the wall clock, so that times taken by different
// goroutines compare), no pointers, so the garbage collector never scans the
// storage.
type record struct {
	worker, device          int
	reqChunk, reqOff, nreqs int32
	deviceTimed             bool
	started, delivered      int64
	in, compute, out        [2]int64 // start, end
	h2d, computeDev, d2h    int64
}

// requestRecord is a Request as the Recorder keeps it.
type requestRecord struct {
	id             uint64
	images         int64
	sent, admitted int64
}

// Chunk sizes of the Recorder's storage: appending never copies what is
// already recorded, so Batch's cost does not grow with the trace. The first
// chunks are small, so that a short trace stays small; each chunk doubles
// until it reaches the maximum.
const (
	firstBatchChunk, batchChunk     = 16, 512
	firstRequestChunk, requestChunk = 64, 4096
)

// chunkSize is the capacity of chunk number n (from 0).
func chunkSize(n, first, most int) int {
	if n >= 16 {
		return most
	}
	return min(first<<n, most)
}

// A Recorder collects batch timelines. It is safe for concurrent use. The
// zero value is not ready: use New. The methods of a nil *Recorder do nothing,
// so a server may call them unconditionally.
//
// A Recorder keeps every batch until Reset: about 130 bytes per batch and 32
// per request. It keeps times as wall-clock Unix nanoseconds (monotonic clock
// readings are dropped), so a step of the system clock during a run shows as a
// jump in the trace.
type Recorder struct {
	mu       sync.Mutex
	batches  [][]record        // full chunks, then the current one
	requests [][]requestRecord // same
	n        int
}

// New returns an empty Recorder.
func New() *Recorder {
	return &Recorder{}
}

// unix is t in Unix nanoseconds, or absent if t is the zero time.
func unix(t time.Time) int64 {
	if t.IsZero() {
		return absent
	}
	return t.UnixNano()
}

// Batch records one executed batch. It copies what it keeps, so the caller
// may reuse b and its Requests once Batch returns.
func (r *Recorder) Batch(b *Batch) {
	if r == nil || b == nil {
		return
	}
	rec := record{
		worker: b.Worker, device: b.Device, nreqs: int32(len(b.Requests)),
		deviceTimed: b.DeviceTimed,
		started:     unix(b.Started), delivered: unix(b.Delivered),
		in:      [2]int64{unix(b.CopyIn.Start), unix(b.CopyIn.End)},
		compute: [2]int64{unix(b.Compute.Start), unix(b.Compute.End)},
		out:     [2]int64{unix(b.CopyOut.Start), unix(b.CopyOut.End)},
		h2d:     int64(b.H2D), computeDev: int64(b.ComputeDev), d2h: int64(b.D2H),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(b.Requests) > 0 {
		last := len(r.requests) - 1
		if last < 0 || cap(r.requests[last])-len(r.requests[last]) < len(b.Requests) {
			r.requests = append(r.requests, make([]requestRecord, 0,
				max(chunkSize(len(r.requests), firstRequestChunk, requestChunk), len(b.Requests))))
			last++
		}
		rec.reqChunk, rec.reqOff = int32(last), int32(len(r.requests[last]))
		for _, q := range b.Requests {
			r.requests[last] = append(r.requests[last], requestRecord{
				id: q.ID, images: int64(q.Images), sent: unix(q.Sent), admitted: unix(q.Admitted),
			})
		}
	}
	last := len(r.batches) - 1
	if last < 0 || len(r.batches[last]) == cap(r.batches[last]) {
		r.batches = append(r.batches, make([]record, 0, chunkSize(len(r.batches), firstBatchChunk, batchChunk)))
		last++
	}
	r.batches[last] = append(r.batches[last], rec)
	r.n++
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

// snapshot returns the recorded batches in the order they were recorded, and
// the request storage they index. Both are shared with the Recorder, which
// only ever appends beyond what it returns.
func (r *Recorder) snapshot() ([]record, [][]requestRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]record, 0, r.n)
	for _, c := range r.batches {
		out = append(out, c...)
	}
	return out, slices.Clone(r.requests)
}

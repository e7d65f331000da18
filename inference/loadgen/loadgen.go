// Package loadgen drives a Target with requests in one of three modes and
// measures what it sees.
//
// A run goes through four steps:
//
//  1. Start checks the Spec and, if Spec.Warmup is set, sends one request,
//     waits for its response and keeps its latency apart (Result.Warmup);
//  2. each Generator.Next sends one counted request when the mode allows it:
//     Burst at once, Closed once fewer than Concurrency requests are
//     outstanding, Open at its scheduled time;
//  3. every outstanding request is waited for by a goroutine the Generator
//     owns, which records the latency from the request's intended send time to
//     its response (so a stalled target shows up in the latency of the requests
//     it delayed: no coordinated omission);
//  4. Generator.Finish waits for every response and returns the Result.
//
// Run does all four for n requests. RunWindows measures in windows until the
// result is stable (as Triton's perf_analyzer does), SearchCapacity looks for
// the highest rate that meets a latency objective, and Scenario maps MLPerf
// LoadGen's scenarios onto these modes and states their results.
package loadgen

import (
	"context"
	"fmt"
	"time"

	"github.com/inferbench/inferbench/inference/metrics"
)

// Target is what a generator drives.
type Target interface {
	// Send admits one request whose intended send time is at, and returns a
	// function that blocks until its response and returns its error. Send
	// itself must not wait for the response. The generator calls the returned
	// function exactly once, from a goroutine of its own.
	Send(ctx context.Context, at time.Time) (wait func() error, err error)
}

// Mode is how a Generator paces its requests.
type Mode int

const (
	// Burst sends every request as soon as Next is called, the seed's
	// semantics: with Spec.Warmup, one warm-up request first, waited for, then
	// N requests back to back.
	Burst Mode = iota
	// Closed keeps Spec.Concurrency requests outstanding: Next waits until
	// fewer are.
	Closed
	// Open sends at Spec.Rate requests per second, at constant or Poisson
	// intervals, whatever the responses do.
	Open
)

// String returns "burst", "closed" or "open".
func (m Mode) String() string {
	switch m {
	case Burst:
		return "burst"
	case Closed:
		return "closed"
	case Open:
		return "open"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode is the inverse of Mode.String.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "burst":
		return Burst, nil
	case "closed":
		return Closed, nil
	case "open":
		return Open, nil
	}
	return 0, fmt.Errorf("loadgen: unknown mode %q (want burst, closed or open)", s)
}

// Spec says how to generate load. Fields that do not apply to Mode are ignored.
type Spec struct {
	Mode Mode
	// Concurrency is, for Closed, the number of requests outstanding at all
	// times. If Concurrency is 0, one is used.
	Concurrency int
	// Rate is, for Open, the mean number of requests per second; it must be
	// positive.
	Rate float64
	// Poisson makes Open use exponentially distributed gaps (a Poisson
	// arrival process) instead of constant ones.
	Poisson bool
	// Seed seeds the generator of Poisson gaps: the same seed gives the same
	// schedule.
	Seed uint64
	// Warmup sends one request in Start and waits for its response before any
	// counted request (the seed's burst semantics; honoured in every mode).
	// It is not counted in Sent, Completed, Failed or Latency.
	Warmup bool
	// LateAfter is, for Open, how long after its scheduled time a send may
	// start and still be on time. If LateAfter is 0, 1 ms is used.
	LateAfter time.Duration
}

// DefaultLateAfter is the LateAfter used when Spec.LateAfter is 0.
const DefaultLateAfter = time.Millisecond

// maxErrs is how many distinct errors a Result keeps.
const maxErrs = 8

// Result is what a run measured.
type Result struct {
	Sent      int     // counted requests sent (or attempted: a failed Send counts)
	Completed int     // responses without error
	Failed    int     // Send errors plus responses with an error
	Errs      []error // the first few distinct errors, by message (at most 8)
	// Warmup is the warm-up request's latency (when Spec.Warmup is set).
	Warmup time.Duration
	// FirstSend is the intended send time of the first counted request.
	FirstSend time.Time
	// LastDone is when the last response (with or without error) arrived.
	LastDone time.Time
	// Latency holds, for every completed request, the time from its intended
	// send time to its response. Failed requests are not in it.
	Latency metrics.Histogram
	// Late is, for Open, the number of sends that started more than
	// Spec.LateAfter after their scheduled time.
	Late int
}

// Elapsed returns LastDone - FirstSend, or 0 when nothing was sent or
// answered.
func (r *Result) Elapsed() time.Duration {
	if r.FirstSend.IsZero() || r.LastDone.IsZero() {
		return 0
	}
	return r.LastDone.Sub(r.FirstSend)
}

// Throughput returns Completed*batch / Elapsed in samples per second (the
// seed's formula, with batch the images per request), or 0 when Elapsed is not
// positive.
func (r *Result) Throughput(batch int) float64 {
	e := r.Elapsed()
	if e <= 0 {
		return 0
	}
	return float64(r.Completed) * float64(batch) / e.Seconds()
}

// LateShare returns Late/Sent, or 0 when nothing was sent.
func (r *Result) LateShare() float64 {
	if r.Sent == 0 {
		return 0
	}
	return float64(r.Late) / float64(r.Sent)
}

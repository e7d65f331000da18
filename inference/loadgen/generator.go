package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// ErrFinished is returned by Next after Finish.
var ErrFinished = errors.New("loadgen: generator finished")

// A Generator sends requests to a Target following a Spec. Next and Finish
// must be called from one goroutine; the Generator's own goroutines wait for
// the responses and are all waited for by Finish.
type Generator struct {
	ctx  context.Context // the run's context, from Start
	t    Target
	spec Spec

	sem chan struct{} // Closed: one token per outstanding request

	// Open schedule: the i-th send (from 0) is due at t0 + offset(i).
	n      int       // sends scheduled so far
	t0     time.Time // when the first send was due
	offset float64   // Poisson: due time of the next send after t0, in ns
	rng    *rand.Rand

	// Owned by the goroutine that calls Next and Finish.
	sent, late int
	firstSend  time.Time
	wg         sync.WaitGroup
	finished   bool

	mu  sync.Mutex // guards res and win, which the waiting goroutines update
	res Result
	win *openWindow // the measurement window responses go to (RunWindows), or nil
}

// Start checks s, makes a Generator that drives t, and sends the warm-up
// request when s.Warmup is set, waiting for its response. ctx bounds the whole
// run: it is passed to every Send, and Next returns ctx.Err() once it is done.
func Start(ctx context.Context, t Target, s Spec) (*Generator, error) {
	if t == nil {
		return nil, errors.New("loadgen: nil Target")
	}
	switch s.Mode {
	case Burst:
	case Closed:
		if s.Concurrency < 0 {
			return nil, fmt.Errorf("loadgen: closed loop with Concurrency %d (want >= 0)", s.Concurrency)
		}
		s.Concurrency = max(1, s.Concurrency)
	case Open:
		if !(s.Rate > 0) || math.IsInf(s.Rate, 1) {
			return nil, fmt.Errorf("loadgen: open loop with Rate %v (want a positive, finite number of requests per second)", s.Rate)
		}
	default:
		return nil, fmt.Errorf("loadgen: unknown %v", s.Mode)
	}
	if s.LateAfter < 0 {
		return nil, fmt.Errorf("loadgen: negative LateAfter %v", s.LateAfter)
	}
	if s.LateAfter == 0 {
		s.LateAfter = DefaultLateAfter
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	g := &Generator{ctx: ctx, t: t, spec: s}
	if s.Mode == Closed {
		g.sem = make(chan struct{}, s.Concurrency)
	}
	if s.Mode == Open && s.Poisson {
		g.rng = rand.New(rand.NewPCG(s.Seed, 0x9e3779b97f4a7c15))
	}
	if s.Warmup {
		at := time.Now()
		wait, err := t.Send(ctx, at)
		if err == nil {
			err = callWait(wait)
		}
		if err != nil {
			return nil, fmt.Errorf("loadgen: warm-up request: %w", err)
		}
		g.res.Warmup = time.Since(at)
	}
	return g, nil
}

// Next sends one counted request following the spec: Burst at once; Closed
// after waiting until fewer than Concurrency requests are outstanding; Open
// after sleeping until the request's scheduled time. Open never catches up by
// skipping: a send that is behind schedule goes at once, keeps its scheduled
// time as its intended send time, and counts as late if it is more than
// LateAfter behind.
//
// Next does not wait for the response. A Send error counts the request as
// sent and failed and is not returned; Next returns an error only when the
// context is done (ctx.Err()) or after Finish (ErrFinished).
func (g *Generator) Next() error {
	if g.finished {
		return ErrFinished
	}
	if err := g.ctx.Err(); err != nil {
		return err
	}
	var at time.Time
	late := false
	switch g.spec.Mode {
	case Burst:
		at = time.Now()
	case Closed:
		select {
		case g.sem <- struct{}{}:
		case <-g.ctx.Done():
			return g.ctx.Err()
		}
		if err := g.ctx.Err(); err != nil {
			<-g.sem
			return err
		}
		at = time.Now()
	case Open:
		at = g.due()
		if d := time.Until(at); d > 0 {
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-g.ctx.Done():
				timer.Stop()
				return g.ctx.Err()
			}
		}
		late = time.Since(at) > g.spec.LateAfter
	}
	g.send(at, late)
	return nil
}

// due returns the scheduled time of the next Open send and advances the
// schedule. The first send is due when Next is first called.
func (g *Generator) due() time.Time {
	i := g.n
	g.n++
	if i == 0 {
		g.t0 = time.Now()
	}
	const second = float64(time.Second)
	if g.rng == nil {
		return g.t0.Add(time.Duration(math.Round(float64(i) * second / g.spec.Rate)))
	}
	if i > 0 {
		g.offset += g.rng.ExpFloat64() * second / g.spec.Rate
	}
	return g.t0.Add(time.Duration(math.Round(g.offset)))
}

// send sends one counted request intended at at, and starts the goroutine
// that waits for its response.
func (g *Generator) send(at time.Time, late bool) {
	if g.sent == 0 {
		g.firstSend = at
	}
	g.sent++
	if late {
		g.late++
	}

	wait, err := g.t.Send(g.ctx, at)
	if err != nil {
		g.done(at, err)
		return
	}
	g.wg.Go(func() { g.done(at, callWait(wait)) })
}

// done records the response, intended at at, that arrived now with err.
func (g *Generator) done(at time.Time, err error) {
	now := time.Now()
	g.mu.Lock()
	if now.After(g.res.LastDone) {
		g.res.LastDone = now
	}
	if err != nil {
		g.res.Failed++
		g.addErr(err)
	} else {
		g.res.Completed++
		g.res.Latency.Record(now.Sub(at))
	}
	if g.win != nil {
		g.win.add(now.Sub(at), err)
	}
	g.mu.Unlock()
	if g.sem != nil {
		<-g.sem
	}
}

// addErr keeps err if its message is new and there is room. g.mu is held.
func (g *Generator) addErr(err error) {
	if len(g.res.Errs) >= maxErrs {
		return
	}
	msg := err.Error()
	for _, e := range g.res.Errs {
		if e.Error() == msg {
			return
		}
	}
	g.res.Errs = append(g.res.Errs, err)
}

// Finish waits for the response of every request sent and returns the
// result. It is idempotent: later calls return the same result.
func (g *Generator) Finish() Result {
	if !g.finished {
		g.wg.Wait()
		g.finished = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.res
	r.Sent, r.Late, r.FirstSend = g.sent, g.late, g.firstSend
	r.Errs = slices.Clone(r.Errs)
	return r
}

// Run starts a Generator, sends n counted requests and finishes. When the
// context ends first, it returns what was measured so far, with ctx.Err().
func Run(ctx context.Context, t Target, s Spec, n int) (Result, error) {
	g, err := Start(ctx, t, s)
	if err != nil {
		return Result{}, err
	}
	for range n {
		if err := g.Next(); err != nil {
			return g.Finish(), err
		}
	}
	return g.Finish(), nil
}

// callWait calls wait and turns a panic in it into an error.
func callWait(wait func() error) (err error) {
	if wait == nil {
		return errors.New("loadgen: Target.Send returned neither a wait function nor an error")
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("loadgen: waiting for a response panicked: %v", p)
		}
	}()
	return wait()
}

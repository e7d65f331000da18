package loadgen

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/inferbench/inferbench/inference/metrics"
)

// WindowSpec asks RunWindows to measure in windows until the result is stable,
// as Triton's perf_analyzer does with its count windows and stability
// percentage: each window lasts at least Duration and holds at least Requests
// responses; the run stops once the last three windows agree within Stability
// percent, or after MaxWindows windows.
type WindowSpec struct {
	// Duration is the shortest a window may be; it must be positive.
	Duration time.Duration
	// Requests is the fewest responses a window may hold; if 0, 1.
	Requests int
	// Stability is how far apart, in percent, the last three windows may be
	// and still agree: max/min <= 1 + Stability/100, for throughput and for
	// the Quantile latency alike. If 0, DefaultStability.
	Stability float64
	// MaxWindows bounds the windows of one run; if 0, DefaultMaxWindows. It
	// must be at least 3.
	MaxWindows int
	// Quantile is the latency quantile compared between windows; if 0, 0.5
	// (the median: the 99th percentile of a window of 50 responses is its
	// maximum, which rarely settles).
	Quantile float64
	// OnBoundary, if set, is called each time a window ends, with the index of
	// that window (from 0), or with -1 when a burst too short to count as a
	// window ends; the next window starts after it returns. RunWindows calls
	// it from its own goroutine, so a caller can take snapshots there (server
	// statistics, a utilisation sampler) that line up with the windows.
	OnBoundary func(window int)
}

// Defaults for zero WindowSpec fields.
const (
	DefaultStability  = 5.0 // percent
	DefaultMaxWindows = 10
)

// A Window is one measurement window.
//
// Under Closed and Open load the windows cut one continuous stream of
// requests: a window holds the responses that arrived between Start and End,
// whenever their requests were sent. Under Burst load each window is a burst
// of its own (sent at once, after the previous burst's last response): Start
// is its first send and End its last response, as in Result.Elapsed.
type Window struct {
	Start, End time.Time
	// Elapsed is the measured time: End - Start for one window, the sum of
	// the windows' own times for a merge (MergeWindows).
	Elapsed   time.Duration
	Completed int // responses without error
	Failed    int // responses with an error, and failed sends (Burst)
	// Sent is the requests sent during the window and Late those of them sent
	// more than Spec.LateAfter behind schedule (Open).
	Sent, Late int
	// Latency holds the latency of every completed response, from its
	// request's intended send time.
	Latency metrics.Histogram
}

// Throughput returns Completed*batch / Elapsed, in samples per second (batch
// is the images per request), or 0 when Elapsed is not positive.
func (w *Window) Throughput(batch int) float64 {
	if w.Elapsed <= 0 {
		return 0
	}
	return float64(w.Completed) * float64(batch) / w.Elapsed.Seconds()
}

// MergeWindows returns one window holding everything in ws: Start of the
// first, End of the last, Elapsed, counts and latencies summed.
func MergeWindows(ws []Window) Window {
	var m Window
	for i := range ws {
		w := &ws[i]
		if i == 0 {
			m.Start = w.Start
		}
		m.End = w.End
		m.Elapsed += w.Elapsed
		m.Completed += w.Completed
		m.Failed += w.Failed
		m.Sent += w.Sent
		m.Late += w.Late
		m.Latency.Merge(&w.Latency)
	}
	return m
}

// Windowed is what RunWindows measured.
type Windowed struct {
	Windows []Window // every window, in order
	// Stable reports whether the last three windows agreed within the
	// stability percentage; false means MaxWindows ran out first.
	Stable bool
	// Result covers the whole run: every counted request, in a window or not
	// (bursts too short to be windows, responses after the last window).
	Result Result
}

// Final returns the merge of the last three windows (or of all when there
// are fewer): the figures to report, as perf_analyzer reports its last three
// measurements.
func (w *Windowed) Final() Window {
	return MergeWindows(w.Windows[max(0, len(w.Windows)-3):])
}

// withDefaults fills zero fields and checks the rest.
func (w WindowSpec) withDefaults() (WindowSpec, error) {
	if w.Requests == 0 {
		w.Requests = 1
	}
	if w.Stability == 0 {
		w.Stability = DefaultStability
	}
	if w.MaxWindows == 0 {
		w.MaxWindows = DefaultMaxWindows
	}
	if w.Quantile == 0 {
		w.Quantile = 0.5
	}
	switch {
	case w.Duration <= 0:
		return w, fmt.Errorf("loadgen: window Duration %v (want a positive duration)", w.Duration)
	case w.Requests < 1:
		return w, fmt.Errorf("loadgen: window Requests %d (want at least 1)", w.Requests)
	case !(w.Stability > 0) || math.IsInf(w.Stability, 1):
		return w, fmt.Errorf("loadgen: window Stability %v (want a positive percentage)", w.Stability)
	case w.MaxWindows < 3:
		return w, fmt.Errorf("loadgen: MaxWindows %d (want at least 3: stability compares the last three windows)", w.MaxWindows)
	case !(w.Quantile > 0 && w.Quantile <= 1):
		return w, fmt.Errorf("loadgen: window Quantile %v (want 0 < q <= 1)", w.Quantile)
	}
	return w, nil
}

// Agree reports whether the last three of ws agree within stability percent:
// for throughput and for the q-quantile latency alike, the largest of the
// three is at most (1 + stability/100) times the smallest. Fewer than three
// windows never agree.
func Agree(ws []Window, stability, q float64) bool {
	if len(ws) < 3 {
		return false
	}
	last := ws[len(ws)-3:]
	var tput, lat [3]float64
	for i := range last {
		tput[i] = last[i].Throughput(1)
		lat[i] = float64(last[i].Latency.Quantile(q))
	}
	return within(tput[:], stability) && within(lat[:], stability)
}

// within reports whether max(v) <= (1+pct/100) * min(v); all zeros agree.
func within(v []float64, pct float64) bool {
	lo, hi := v[0], v[0]
	for _, x := range v[1:] {
		lo, hi = min(lo, x), max(hi, x)
	}
	if hi == 0 {
		return true
	}
	return hi <= lo*(1+pct/100)
}

// maxBurst bounds the size of one burst window.
const maxBurst = 1 << 24

// RunWindows drives t with s's load in measurement windows (see WindowSpec)
// until the last three agree or MaxWindows windows have run, then waits for
// every response. With s.Warmup, one warm-up request goes first, outside
// every window.
//
// Under Closed and Open load the requests flow without a break and a window
// ends, after a send, once it is at least w.Duration long and holds at least
// w.Requests responses. Under Burst load each window is one burst of N
// requests, N starting at w.Requests; a burst shorter than w.Duration is not
// a window: N grows in proportion and the burst is repeated.
//
// When ctx ends first, RunWindows returns what was measured with ctx's error.
func RunWindows(ctx context.Context, t Target, s Spec, w WindowSpec) (Windowed, error) {
	w, err := w.withDefaults()
	if err != nil {
		return Windowed{}, err
	}
	if s.Mode == Burst {
		return burstWindows(ctx, t, s, w)
	}
	g, err := Start(ctx, t, s)
	if err != nil {
		return Windowed{}, err
	}
	var out Windowed
	g.mu.Lock()
	g.win = &openWindow{start: time.Now(), sent: g.sent, late: g.late}
	g.mu.Unlock()
	for {
		if err = g.Next(); err != nil {
			break
		}
		if !g.windowDone(w) {
			continue
		}
		out.Windows = append(out.Windows, g.cutWindow())
		if w.OnBoundary != nil {
			w.OnBoundary(len(out.Windows) - 1)
		}
		if out.Stable = Agree(out.Windows, w.Stability, w.Quantile); out.Stable || len(out.Windows) == w.MaxWindows {
			break
		}
	}
	out.Result = g.Finish()
	return out, err
}

// openWindow collects the responses of the window in progress (continuous
// load). The Generator's mu guards it.
type openWindow struct {
	start             time.Time
	sent, late        int // the Generator's counts when the window started
	completed, failed int
	latency           metrics.Histogram
}

func (o *openWindow) add(latency time.Duration, err error) {
	if err != nil {
		o.failed++
		return
	}
	o.completed++
	o.latency.Record(latency)
}

// windowDone reports whether the window in progress is long and full enough.
func (g *Generator) windowDone(w WindowSpec) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return time.Since(g.win.start) >= w.Duration && g.win.completed >= w.Requests
}

// cutWindow ends the window in progress now and starts the next. It is
// called from the goroutine that calls Next, which owns g.sent and g.late.
func (g *Generator) cutWindow() Window {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	o := g.win
	g.win = &openWindow{start: now, sent: g.sent, late: g.late}
	return Window{Start: o.start, End: now, Elapsed: now.Sub(o.start), Completed: o.completed, Failed: o.failed,
		Sent: g.sent - o.sent, Late: g.late - o.late, Latency: o.latency}
}

// burstWindows runs RunWindows for Burst load: one burst per window.
func burstWindows(ctx context.Context, t Target, s Spec, w WindowSpec) (Windowed, error) {
	var out Windowed
	if s.Warmup {
		g, err := Start(ctx, t, s)
		if err != nil {
			return out, err
		}
		out.Result.Warmup = g.Finish().Warmup
		s.Warmup = false
	}
	n := w.Requests
	for len(out.Windows) < w.MaxWindows {
		r, err := Run(ctx, t, s, n)
		addResult(&out.Result, &r)
		if err != nil {
			return out, err
		}
		win := r.Window()
		if win.Elapsed < w.Duration {
			if n >= maxBurst {
				return out, fmt.Errorf("loadgen: a burst of %d requests lasted %v, shorter than the window's %v", n, win.Elapsed, w.Duration)
			}
			n = growBurst(n, win.Elapsed, w.Duration)
			if w.OnBoundary != nil {
				w.OnBoundary(-1)
			}
			continue
		}
		out.Windows = append(out.Windows, win)
		if w.OnBoundary != nil {
			w.OnBoundary(len(out.Windows) - 1)
		}
		if out.Stable = Agree(out.Windows, w.Stability, w.Quantile); out.Stable {
			break
		}
	}
	return out, nil
}

// growBurst returns the burst size expected to last want, from a burst of n
// requests that lasted got (< want): in proportion, with a tenth to spare, at
// least one more, at most maxBurst.
func growBurst(n int, got, want time.Duration) int {
	next := float64(n) * 10
	if got > 0 {
		next = math.Ceil(float64(n) * 1.1 * float64(want) / float64(got))
	}
	return int(min(float64(maxBurst), max(next, float64(n+1))))
}

// addResult adds r, a later run, to the running total.
func addResult(total, r *Result) {
	if total.Sent == 0 {
		total.FirstSend = r.FirstSend
	}
	total.Sent += r.Sent
	total.Completed += r.Completed
	total.Failed += r.Failed
	total.Late += r.Late
	if r.LastDone.After(total.LastDone) {
		total.LastDone = r.LastDone
	}
	total.Latency.Merge(&r.Latency)
	for _, e := range r.Errs {
		if len(total.Errs) < maxErrs && !hasErr(total.Errs, e) {
			total.Errs = append(total.Errs, e)
		}
	}
}

func hasErr(errs []error, err error) bool {
	for _, e := range errs {
		if e.Error() == err.Error() {
			return true
		}
	}
	return false
}

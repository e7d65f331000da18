package inferbench_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/loadgen"
	"github.com/inferbench/inferbench/inference/metrics"
)

// serverTarget adapts an in-process server to the load generator: every
// request sends in (which must not change while the load runs). With log set,
// every answer's timing is kept for -requests.
type serverTarget struct {
	s   *inference.Server
	in  inference.Tensor
	log *requestLog
}

func (t serverTarget) Send(ctx context.Context, at time.Time) (func() error, error) {
	c, err := t.s.Submit(ctx, inference.Request{Input: t.in, Sent: at})
	if err != nil {
		return nil, err
	}
	if t.log == nil {
		return c.Err, nil
	}
	return func() error {
		resp, err := c.Result()
		rec := requestRecord{err: err}
		if resp != nil {
			rec.timing = resp.Timing
		} else {
			rec.timing.Sent = at
		}
		t.log.add(rec)
		return err
	}, nil
}

// requestRecord is what -requests writes of one request.
type requestRecord struct {
	timing inference.Timing
	err    error
}

// requestLog collects the records of one measured run; safe for concurrent
// use.
type requestLog struct {
	mu   sync.Mutex
	recs []requestRecord
}

func (l *requestLog) add(r requestRecord) {
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
}

// clear forgets the records so far; a nil log does nothing.
func (l *requestLog) clear() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.recs = l.recs[:0]
	l.mu.Unlock()
}

// runSpec is one measured run: the load, its length and what to call around
// the measured interval.
type runSpec struct {
	// target receives the warm-up and every counted request: the in-process
	// server (serverTarget), or a client of a server behind a network front
	// door.
	target loadgen.Target
	batch  int          // images per request
	load   loadgen.Spec // Warmup is ignored: measure sends its own
	n      int          // counted requests, when window is nil
	window *loadgen.WindowSpec
	// start and stop, if set, are called right before the first counted
	// request and right after the last response (b.ResetTimer, b.StopTimer).
	start, stop func()
}

// serverSums are server-side figures over an interval, as sums so that
// intervals add up.
type serverSums struct {
	stage          [metrics.NumStages]struct{ n, sum int64 }
	batches, items uint64
}

// serverDelta returns what happened between two Stats snapshots.
func serverDelta(before, after inference.Stats) serverSums {
	var d serverSums
	for i := range d.stage {
		st := after.Stages[i].Sub(before.Stages[i])
		d.stage[i].n, d.stage[i].sum = int64(st.Count), int64(st.Sum)
	}
	d.batches, d.items = after.Batches-before.Batches, after.Items-before.Items
	return d
}

func (d *serverSums) add(o serverSums) {
	for i := range d.stage {
		d.stage[i].n += o.stage[i].n
		d.stage[i].sum += o.stage[i].sum
	}
	d.batches += o.batches
	d.items += o.items
}

// stageMean returns the mean time of stage over the interval, or false when
// no request completed it.
func (d *serverSums) stageMean(s metrics.Stage) (time.Duration, bool) {
	st := d.stage[s]
	if st.n == 0 {
		return 0, false
	}
	return time.Duration(st.sum / st.n), true
}

// measurement is what one run measured. Every figure covers the reported
// interval: the whole run, or the last three windows in window mode.
type measurement struct {
	batch    int
	mode     loadgen.Mode
	final    loadgen.Window // the reported interval's responses
	whole    loadgen.Result // every counted request of the run
	windowed bool
	windows  int
	stable   bool
	server   serverSums
	util     backend.Utilization
	hasUtil  bool
}

// measure runs one measured run of rs against rs.target, taking the
// server-side figures from s, the server behind it:
//
//  1. one warm-up request, answered before anything is measured (in every
//     mode alike);
//  2. a Stats snapshot, the back-end's sampler started, rs.start;
//  3. the counted requests (rs.n, or windows until stable), every response
//     waited for, rs.stop;
//  4. the sampler stopped and Stats differenced over the reported interval.
func measure(ctx context.Context, s *inference.Server, rs runSpec) (measurement, error) {
	m := measurement{batch: rs.batch, mode: rs.load.Mode}
	if err := warmUp(ctx, rs.target); err != nil {
		return m, err
	}
	if t := s.Config().Trace; t != nil {
		t.Reset()
	}
	sampler := s.Sampler()
	before := s.Stats()
	if sampler != nil {
		if err := sampler.Start(); err != nil {
			return m, fmt.Errorf("starting the utilisation sampler: %w", err)
		}
	}
	spec := rs.load
	spec.Warmup = false
	t := rs.target
	if rs.start != nil {
		rs.start()
	}
	var err error
	if rs.window == nil {
		var g *loadgen.Generator
		if g, err = loadgen.Start(ctx, t, spec); err != nil {
			return m, err
		}
		for range rs.n {
			if err = g.Next(); err != nil {
				break
			}
		}
		m.whole = g.Finish()
		if rs.stop != nil {
			rs.stop()
		}
		m.final = m.whole.Window()
		if sampler != nil {
			m.util, err = stopSampler(sampler, err)
			m.hasUtil = true
		}
		m.server = serverDelta(before, s.Stats())
		return m, err
	}
	return measureWindows(ctx, s, t, spec, rs, before, sampler)
}

// measureWindows is step 3 and 4 of measure in window mode: server figures
// and utilisation are taken per window and added up over the last three.
func measureWindows(ctx context.Context, s *inference.Server, t loadgen.Target, spec loadgen.Spec, rs runSpec,
	before inference.Stats, sampler backend.Sampler) (measurement, error) {
	m := measurement{batch: rs.batch, mode: rs.load.Mode, windowed: true}
	var (
		perServer []serverSums
		perUtil   []backend.Utilization
		errs      []error
	)
	start := before
	ws := *rs.window
	ws.OnBoundary = func(i int) {
		now := s.Stats()
		if i >= 0 {
			perServer = append(perServer, serverDelta(start, now))
		}
		start = now
		if sampler != nil {
			u, err := sampler.Stop()
			errs = append(errs, err, sampler.Start())
			if i >= 0 {
				perUtil = append(perUtil, u)
			}
		}
	}
	w, err := loadgen.RunWindows(ctx, t, spec, ws)
	if rs.stop != nil {
		rs.stop()
	}
	if sampler != nil {
		_, serr := sampler.Stop()
		errs = append(errs, serr)
	}
	if err == nil {
		err = errors.Join(errs...)
	}
	m.whole, m.windows, m.stable = w.Result, len(w.Windows), w.Stable
	if len(w.Windows) == 0 {
		return m, errors.Join(err, errors.New("no measurement window completed"))
	}
	m.final = w.Final()
	first := len(w.Windows) - min(3, len(w.Windows))
	for _, d := range perServer[first:] {
		m.server.add(d)
	}
	if sampler != nil && len(perUtil) == len(w.Windows) {
		m.util, m.hasUtil = combineUtil(perUtil[first:], w.Windows[first:]), true
	}
	return m, err
}

// warmUp sends one request and waits for its answer.
func warmUp(ctx context.Context, t loadgen.Target) error {
	wait, err := t.Send(ctx, time.Now())
	if err == nil {
		err = wait()
	}
	if err != nil {
		return fmt.Errorf("warm-up request: %w", err)
	}
	return nil
}

// stopSampler stops s, joining its error to err.
func stopSampler(s backend.Sampler, err error) (backend.Utilization, error) {
	u, serr := s.Stop()
	if serr != nil {
		serr = fmt.Errorf("stopping the utilisation sampler: %w", serr)
	}
	return u, errors.Join(err, serr)
}

// combineUtil merges per-window utilisation: a sampled percentage weighted
// by samples, a whole-interval one (Samples 0) and the busy share weighted by
// the windows' lengths.
func combineUtil(us []backend.Utilization, ws []loadgen.Window) backend.Utilization {
	out := us[0]
	var pct, busy, wsum float64
	samples := 0
	for i, u := range us {
		wt := ws[i].Elapsed.Seconds()
		wsum += wt
		busy += u.Busy * wt
		if u.Samples > 0 {
			pct += u.Percent * float64(u.Samples)
		} else {
			pct += u.Percent * wt
		}
		samples += u.Samples
	}
	out.Samples = samples
	switch {
	case samples > 0:
		out.Percent = pct / float64(samples)
	case wsum > 0:
		out.Percent = pct / wsum
	}
	if wsum > 0 {
		out.Busy = busy / wsum
	}
	return out
}

// figure is one reported metric.
type figure struct {
	unit  string
	value float64
}

// figures returns the metrics of m, in the units table's order, leaving out
// every figure that was not measured: a stage no request went through, a GPU
// utilisation without a single NVML sample, a mean batch without batches.
// warm is the server's warm-up; peakRSS is in bytes (negative: unknown).
func figures(m *measurement, warm inference.Warmup, peakRSS int64) []figure {
	var out []figure
	add := func(unit string, v float64) { out = append(out, figure{unit, v}) }
	if m.windowed && m.final.Completed > 0 {
		// testing's ns/op would divide the whole run by b.N (1): report the
		// windows' own time per request instead.
		add("ns/op", float64(m.final.Elapsed)/float64(m.final.Completed))
	}
	add("samples/s", m.final.Throughput(m.batch))
	add("req/s", m.final.Throughput(1))
	if m.final.Latency.Count() > 0 {
		lat := m.final.Latency.Summary()
		for _, d := range []struct {
			unit string
			v    time.Duration
		}{
			{"mean-latency-ns", lat.Mean}, {"std-latency-ns", lat.Std}, {"min-latency-ns", lat.Min}, {"max-latency-ns", lat.Max},
			{"p50-latency-ns", lat.P50}, {"p90-latency-ns", lat.P90}, {"p99-latency-ns", lat.P99}, {"p999-latency-ns", lat.P999},
		} {
			add(d.unit, float64(d.v))
		}
	}
	add("warmup-ns", float64(warm.Total()))
	add("load-ns", float64(warm.Load))
	add("setup-ns", float64(warm.Setup))
	add("first-ns", float64(warm.First))
	for _, st := range []struct {
		stage metrics.Stage
		unit  string
	}{{metrics.Queue, "queue-ns"}, {metrics.CopyIn, "h2d-ns"}, {metrics.Compute, "compute-ns"}, {metrics.CopyOut, "d2h-ns"}} {
		if d, ok := m.server.stageMean(st.stage); ok {
			add(st.unit, float64(d))
		}
	}
	if m.hasUtil {
		out = append(out, utilFigures(m.util)...)
	}
	if m.mode == loadgen.Open && m.final.Sent > 0 {
		add("late-pct", 100*float64(m.final.Late)/float64(m.final.Sent))
	}
	if m.server.batches > 0 {
		add("mean-batch", float64(m.server.items)/float64(m.server.batches))
	}
	if peakRSS >= 0 {
		add("peak-rss-MB", float64(peakRSS)/(1<<20))
	}
	if m.windowed {
		add("windows", float64(m.windows))
		stable := 0.0
		if m.stable {
			stable = 1
		}
		add("stable", stable)
	}
	return out
}

// utilFigures returns the utilisation metrics a sampler measured: the
// process's CPU share (measured over the whole interval at once); NVML's GPU
// utilisation only when at least one sample was taken, with the sample count;
// the GPU busy share when the back-end measured it.
func utilFigures(u backend.Utilization) []figure {
	var out []figure
	switch u.Kind {
	case backend.ProcessCPU:
		out = append(out, figure{"cpu-util-pct", u.Percent})
	case backend.GPUUtilization:
		if u.Samples > 0 {
			out = append(out, figure{"gpu-util-pct", u.Percent})
		}
		out = append(out, figure{"gpu-util-samples", float64(u.Samples)})
	}
	if u.HasBusy {
		out = append(out, figure{"gpu-busy-pct", u.Busy})
	}
	return out
}

package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/loadgen"
	"github.com/inferbench/inferbench/inference/metrics"
)

// serverTarget adapts an in-process server to the load generator: every
// request sends in (which must not change while the load runs). With log set,
// every answer's timing is kept for -requests. With poll set (-client-poll),
// the waiting goroutine looks for its answer that long before it sleeps, so
// that the worker that answers wakes no thread.
type serverTarget struct {
	s    *inference.Server
	in   inference.Tensor
	log  *requestLog
	poll time.Duration
}

func (t serverTarget) Send(ctx context.Context, at time.Time) (func() error, error) {
	c, err := t.s.Submit(ctx, inference.Request{Input: t.in, Sent: at})
	if err != nil {
		return nil, err
	}
	if t.log == nil && t.poll == 0 {
		return c.Err, nil
	}
	return func() error {
		inference.PollDone(t.poll, c.Done(), nil)
		if t.log == nil {
			return c.Err()
		}
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

// requestRecord is what -requests writes of one request. A remote
// server's request has only its send and arrival times, on the suite's
// clock, and the server that answered it.
type requestRecord struct {
	timing inference.Timing
	err    error
	remote bool
	server int // remote: the server's index
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
	// server (serverTarget), or servers behind a network front door
	// (fleetTarget).
	target loadgen.Target
	// warm, if set, is the warm-up; nil: one request through target.
	warm   func(context.Context) error
	batch  int          // images per request
	load   loadgen.Spec // Warmup is ignored: measure sends its own
	n      int          // counted requests, when window is nil
	window *loadgen.WindowSpec
	// start and stop, if set, are called right before the first counted
	// request and right after the last response (b.ResetTimer, b.StopTimer).
	start, stop func()
}

// serverView is what measure reads of the servers behind a target.
type serverView interface {
	// snapshot returns their cumulative figures now.
	snapshot(ctx context.Context) (snapshot, error)
	// sampler returns their utilisation sampler, or nil.
	sampler() backend.Sampler
}

// snapshot is the cumulative figures of the servers behind a target, so that
// two snapshots give an interval's.
type snapshot struct {
	// servers holds each server's own figures; nil when the servers offer
	// none the suite can read.
	servers []serverSums
	// answered counts, per server, the responses without error the suite
	// received (servers over a network); nil in process.
	answered []uint64
}

// sub returns s - earlier.
func (s snapshot) sub(earlier snapshot) snapshot {
	var d snapshot
	if s.servers != nil && len(earlier.servers) == len(s.servers) {
		d.servers = make([]serverSums, len(s.servers))
		for i := range s.servers {
			d.servers[i] = s.servers[i].sub(earlier.servers[i])
		}
	}
	if s.answered != nil && len(earlier.answered) == len(s.answered) {
		d.answered = make([]uint64, len(s.answered))
		for i := range s.answered {
			d.answered[i] = s.answered[i] - earlier.answered[i]
		}
	}
	return d
}

// add adds o, the figures of a later interval, to s.
func (s *snapshot) add(o snapshot) {
	if s.servers == nil && s.answered == nil {
		s.servers = slices.Clone(o.servers)
		s.answered = slices.Clone(o.answered)
		return
	}
	for i := range min(len(s.servers), len(o.servers)) {
		s.servers[i].add(o.servers[i])
	}
	for i := range min(len(s.answered), len(o.answered)) {
		s.answered[i] += o.answered[i]
	}
}

// inprocView reads an in-process server.
type inprocView struct{ s *inference.Server }

func (v inprocView) snapshot(context.Context) (snapshot, error) {
	return snapshot{servers: []serverSums{sumsOf(v.s.Stats())}}, nil
}

func (v inprocView) sampler() backend.Sampler { return v.s.Sampler() }

// warmedUp forgets the trace of the warm-up.
func (v inprocView) warmedUp() {
	if t := v.s.Config().Trace; t != nil {
		t.Reset()
	}
}

// serverSums are server-side figures, cumulative or over an interval, as
// sums so that intervals add up.
type serverSums struct {
	stage          [metrics.NumStages]struct{ n, sum int64 }
	batches, items uint64
}

// sumsOf returns a server's cumulative figures.
func sumsOf(st inference.Stats) serverSums {
	var d serverSums
	for i := range d.stage {
		d.stage[i].n, d.stage[i].sum = int64(st.Stages[i].Count), int64(st.Stages[i].Sum)
	}
	d.batches, d.items = st.Batches, st.Items
	return d
}

// sub returns d - earlier.
func (d serverSums) sub(earlier serverSums) serverSums {
	for i := range d.stage {
		d.stage[i].n -= earlier.stage[i].n
		d.stage[i].sum -= earlier.stage[i].sum
	}
	d.batches -= earlier.batches
	d.items -= earlier.items
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
	server   serverSums // every server's figures added up
	answered []uint64   // per server: responses received (servers over a network)
	util     backend.Utilization
	hasUtil  bool
}

// setServers keeps the interval's figures d.
func (m *measurement) setServers(d snapshot) {
	m.server = serverSums{}
	for _, s := range d.servers {
		m.server.add(s)
	}
	m.answered = d.answered
}

// measure runs one measured run of rs against rs.target, taking the
// server-side figures from view, the servers behind it:
//
//  1. the warm-up (rs.warm, or one request), answered before anything is
//     measured (in every mode alike);
//  2. a snapshot of the servers' figures, the sampler started, rs.start;
//  3. the counted requests (rs.n, or windows until stable), every response
//     waited for, rs.stop;
//  4. the sampler stopped and the figures differenced over the reported
//     interval.
func measure(ctx context.Context, view serverView, rs runSpec) (measurement, error) {
	m := measurement{batch: rs.batch, mode: rs.load.Mode}
	warm := rs.warm
	if warm == nil {
		warm = func(ctx context.Context) error { return warmUp(ctx, rs.target) }
	}
	if err := warm(ctx); err != nil {
		return m, err
	}
	if w, ok := view.(interface{ warmedUp() }); ok {
		w.warmedUp()
	}
	sampler := view.sampler()
	before, err := view.snapshot(ctx)
	if err != nil {
		return m, err
	}
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
	if rs.window != nil {
		return measureWindows(ctx, view, t, spec, rs, before, sampler)
	}
	g, err := loadgen.Start(ctx, t, spec)
	if err != nil {
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
	after, serr := view.snapshot(ctx)
	m.setServers(after.sub(before))
	return m, errors.Join(err, serr)
}

// measureWindows is step 3 and 4 of measure in window mode: server figures
// and utilisation are taken per window and added up over the last three.
func measureWindows(ctx context.Context, view serverView, t loadgen.Target, spec loadgen.Spec, rs runSpec,
	before snapshot, sampler backend.Sampler) (measurement, error) {
	m := measurement{batch: rs.batch, mode: rs.load.Mode, windowed: true}
	var (
		perServer []snapshot
		perUtil   []backend.Utilization
		errs      []error
	)
	start := before
	ws := *rs.window
	ws.OnBoundary = func(i int) {
		now, err := view.snapshot(ctx)
		errs = append(errs, err)
		if i >= 0 {
			perServer = append(perServer, now.sub(start))
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
	var sum snapshot
	for _, d := range perServer[first:] {
		sum.add(d)
	}
	m.setServers(sum)
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

// warmupInfo is what the suite knows of the servers' warm-up: the
// in-process server's, a started server's (from its log, with the time from
// its start to serving), or nothing (a -target server).
type warmupInfo struct {
	known bool
	inference.Warmup
	start time.Duration // from the process's start to serving; 0: in process
}

// figures returns the metrics of m, in the units table's order, leaving out
// every figure that was not measured: a stage no request went through, a GPU
// utilisation without a single NVML sample, a mean batch without batches.
// peakRSS is in bytes (negative: unknown).
func figures(m *measurement, warm warmupInfo, peakRSS int64) []figure {
	var out []figure
	add := func(unit string, v float64) { out = append(out, figure{unit, v}) }
	if m.windowed && m.final.Completed > 0 {
		// testing's ns/op would divide the whole run by b.N (1): report the
		// windows' own time per request instead.
		add("ns/op", float64(m.final.Elapsed)/float64(m.final.Completed))
	}
	add("samples/s", m.final.Throughput(m.batch))
	add("req/s", m.final.Throughput(1))
	if len(m.answered) > 1 && m.final.Elapsed > 0 {
		for i, n := range m.answered {
			add(serverUnit(i), float64(n)/m.final.Elapsed.Seconds())
		}
	}
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
	if warm.known {
		add("warmup-ns", float64(warm.Total()))
		add("load-ns", float64(warm.Load))
		add("setup-ns", float64(warm.Setup))
		add("first-ns", float64(warm.First))
	}
	if warm.start > 0 {
		add("start-ns", float64(warm.start))
	}
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

// serverUnit is the unit of server i's share of the responses:
// server0-req/s, server1-req/s...
func serverUnit(i int) string { return fmt.Sprintf("server%d-req/s", i) }

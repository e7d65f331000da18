package cuda

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/par"
)

// stopwatch times the sub-steps of Open's steps ("init.context" is a sub-step
// of "init"). Sub-steps may run several times and concurrently (the workers'
// handles are made at once); a sub-step's time is the wall time during which
// at least one run of it was in progress: the length of the union of its
// runs' intervals, so that serial runs add up and concurrent runs count once.
// It is safe for concurrent use.
type stopwatch struct {
	now    func() time.Time // time.Now, or a test's clock
	origin time.Time        // when it was made: the timeline's zero

	mu    sync.Mutex
	names []string // in order of first use
	runs  map[string][]interval
}

// interval is one run; what, if set, tells it from the sub-step's other runs
// in the timeline ("batch 256 uint8").
type interval struct {
	start, end time.Time
	what       string
}

func newStopwatch(now func() time.Time) *stopwatch {
	return &stopwatch{now: now, origin: now(), runs: map[string][]interval{}}
}

// time runs f as one run of sub-step name and returns f's error.
func (s *stopwatch) time(name string, f func() error) error {
	return s.timeWhat(name, "", f)
}

// timeWhat is time with a run's description for the timeline.
func (s *stopwatch) timeWhat(name, what string, f func() error) error {
	start := s.now()
	err := f()
	s.recordWhat(name, what, start, s.now())
	return err
}

// record adds the run [start, end) of sub-step name.
func (s *stopwatch) record(name string, start, end time.Time) {
	s.recordWhat(name, "", start, end)
}

func (s *stopwatch) recordWhat(name, what string, start, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.runs[name]; !ok {
		s.names = append(s.names, name)
	}
	s.runs[name] = append(s.runs[name], interval{start, end, what})
}

// merge adds o's runs to s (a Start's early set-up to the Open that takes it
// over).
func (s *stopwatch) merge(o *stopwatch) {
	for _, r := range o.all() {
		s.recordWhat(r.name, r.what, r.start, r.end)
	}
}

// A file path in switches.CUDATimeline has Open write there the timeline
// of its sub-steps' runs (and of a Start's early set-up before it:
// start.libraries, start.driver, start.context), one a line with its start
// and end in milliseconds from Open's beginning, so that the critical path
// of a start can be read; the config line cuda-timeline names the file, or
// says why it could not be written.

// writeTimeline writes s's timeline to the file path.
func writeTimeline(path string, s *stopwatch) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(s.writeTimeline(f), f.Close())
}

// namedRun is a run with its sub-step's name.
type namedRun struct {
	name string
	interval
}

// all returns every run, sub-step by sub-step in order of first use.
func (s *stopwatch) all() []namedRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	var runs []namedRun
	for _, n := range s.names {
		for _, r := range s.runs[n] {
			runs = append(runs, namedRun{n, r})
		}
	}
	return runs
}

// writeTimeline writes every run, in order of start, one a line: its start
// and end in milliseconds from the stopwatch's making (negative for runs a
// Start made before), its length, its sub-step and what it was.
func (s *stopwatch) writeTimeline(w io.Writer) error {
	runs := s.all()
	slices.SortStableFunc(runs, func(a, b namedRun) int { return a.start.Compare(b.start) })
	ms := func(d time.Duration) string { return fmt.Sprintf("%9.3f", float64(d)/1e6) }
	if _, err := fmt.Fprintf(w, "# start-ms    end-ms    length-ms  sub-step (what), from %s\n", s.origin.Format(time.RFC3339Nano)); err != nil {
		return err
	}
	for _, r := range runs {
		line := fmt.Sprintf("%s %s %s  %s", ms(r.start.Sub(s.origin)), ms(r.end.Sub(s.origin)), ms(r.end.Sub(r.start)), r.name)
		if r.what != "" {
			line += " (" + r.what + ")"
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// total is the length of the union of name's runs.
func (s *stopwatch) total(name string) time.Duration {
	s.mu.Lock()
	runs := append([]interval(nil), s.runs[name]...)
	s.mu.Unlock()
	slices.SortFunc(runs, func(a, b interval) int { return a.start.Compare(b.start) })
	var sum time.Duration
	var cur interval
	for i, r := range runs {
		switch {
		case i == 0:
			cur = r
		case r.start.After(cur.end):
			sum += cur.end.Sub(cur.start)
			cur = r
		case r.end.After(cur.end):
			cur.end = r.end
		}
	}
	if len(runs) > 0 {
		sum += cur.end.Sub(cur.start)
	}
	return sum
}

// parts returns steps with each step's sub-steps (named "step.sub") after
// it, in the order they were first run.
func (s *stopwatch) parts(steps []backend.Part) []backend.Part {
	s.mu.Lock()
	names := append([]string(nil), s.names...)
	s.mu.Unlock()
	var out []backend.Part
	for _, st := range steps {
		out = append(out, st)
		for _, n := range names {
			if strings.HasPrefix(n, st.Name+".") {
				out = append(out, backend.Part{Name: n, Time: s.total(n)})
			}
		}
	}
	return out
}

// concurrently runs every f on its own goroutine, waits for all of them and
// returns their errors joined; a panic in one becomes its error.
func concurrently(fs ...func() error) error {
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					errs[i] = fmt.Errorf("cuda: panic during set-up: %v", r)
				}
			}()
			errs[i] = f()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// parallelFor calls f(lo, hi) for consecutive ranges that cover [0, n), of at
// least grain each, on up to GOMAXPROCS goroutines, and waits for them.
func parallelFor(n, grain int, f func(lo, hi int)) {
	parts := max(1, min(runtime.GOMAXPROCS(0), (n+grain-1)/grain))
	par.Do(parts, func(p int) { f(n*p/parts, n*(p+1)/parts) })
}

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
)

// stopwatch times the sub-steps of Open's steps ("init.context" is a sub-step
// of "init"). Sub-steps may run several times and concurrently (the workers'
// handles are made at once); a sub-step's time is the wall time during which
// at least one run of it was in progress: the length of the union of its
// runs' intervals, so that serial runs add up and concurrent runs count once.
// It is safe for concurrent use.
type stopwatch struct {
	now func() time.Time // time.Now, or a test's clock

	mu    sync.Mutex
	names []string // in order of first use
	runs  map[string][]interval
}

type interval struct{ start, end time.Time }

func newStopwatch(now func() time.Time) *stopwatch {
	return &stopwatch{now: now, runs: map[string][]interval{}}
}

// time runs f as one run of sub-step name and returns f's error.
func (s *stopwatch) time(name string, f func() error) error {
	start := s.now()
	err := f()
	s.record(name, start, s.now())
	return err
}

// record adds the run [start, end) of sub-step name.
func (s *stopwatch) record(name string, start, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.runs[name]; !ok {
		s.names = append(s.names, name)
	}
	s.runs[name] = append(s.runs[name], interval{start, end})
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
	parts := min(runtime.GOMAXPROCS(0), (n+grain-1)/grain)
	if parts <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := n*p/parts, n*(p+1)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

package cuda

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
)

func TestStopwatch(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		runs [][2]int // start and end of each run, in ms
		want time.Duration
	}{
		{"one run", [][2]int{{0, 10}}, 10 * time.Millisecond},
		{"serial runs add up", [][2]int{{0, 10}, {20, 25}, {30, 40}}, 25 * time.Millisecond},
		{"concurrent runs count once", [][2]int{{0, 10}, {2, 8}, {5, 12}}, 12 * time.Millisecond},
		{"out of order", [][2]int{{30, 40}, {0, 10}, {5, 15}}, 25 * time.Millisecond},
		{"touching runs", [][2]int{{0, 10}, {10, 20}}, 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStopwatch(time.Now)
			for _, r := range tt.runs {
				s.record("init.x", at(r[0]), at(r[1]))
			}
			assert.Equal(t, tt.want, s.total("init.x"))
		})
	}
}

func TestStopwatchTime(t *testing.T) {
	// A clock that advances 3 ms per reading: a run of f lasts 3 ms.
	var ticks atomic.Int64
	now := func() time.Time { return time.Unix(0, ticks.Add(int64(3*time.Millisecond))) }
	s := newStopwatch(now)
	boom := errors.New("boom")
	assert.ErrorIs(t, s.time("plan.search", func() error { return boom }), boom)
	require.NoError(t, s.time("plan.search", func() error { return nil }))
	assert.Equal(t, 6*time.Millisecond, s.total("plan.search"))
}

func TestStopwatchParts(t *testing.T) {
	s := newStopwatch(time.Now)
	t0 := time.Unix(0, 0)
	for _, n := range []string{"plan.search", "init.driver", "init.context", "init.pin", "planner.x"} {
		s.record(n, t0, t0.Add(time.Millisecond))
	}
	steps := []backend.Part{{Name: "init", Time: 5}, {Name: "plan", Time: 6}, {Name: "prime", Time: 7}}
	var names []string
	for _, p := range s.parts(steps) {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"init", "init.driver", "init.context", "init.pin", "plan", "plan.search", "prime"}, names,
		"sub-steps follow their step in order of first use; others are left out")
}

func TestConcurrently(t *testing.T) {
	var ran atomic.Int32
	a, b := errors.New("a"), errors.New("b")
	err := concurrently(
		func() error { ran.Add(1); return a },
		func() error { ran.Add(1); return nil },
		func() error { ran.Add(1); return b },
	)
	assert.Equal(t, int32(3), ran.Load(), "every function ran")
	assert.ErrorIs(t, err, a)
	assert.ErrorIs(t, err, b)

	err = concurrently(func() error { panic("oops") }, func() error { return nil })
	assert.ErrorContains(t, err, "panic during set-up: oops")
	assert.NoError(t, concurrently())
}

func TestStopwatchTimeline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	early := newStopwatch(func() time.Time { return at(-50) })
	early.recordWhat("start.context", "device 0", at(-40), at(-10))
	s := newStopwatch(func() time.Time { return t0 })
	s.recordWhat("capture.record.first-slot", "worker 1 slot 0 batch 256", at(30), at(90))
	s.record("init.pin", at(5), at(7))
	s.merge(early)
	var b strings.Builder
	require.NoError(t, s.writeTimeline(&b))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 4, "a header and a line a run:\n%s", b.String())
	assert.Equal(t, []string{
		"  -40.000   -10.000    30.000  start.context (device 0)",
		"    5.000     7.000     2.000  init.pin",
		"   30.000    90.000    60.000  capture.record.first-slot (worker 1 slot 0 batch 256)",
	}, lines[1:], "runs in order of start, in ms from the stopwatch's making")
	assert.Equal(t, 30*time.Millisecond, s.total("start.context"), "merged runs count")
}

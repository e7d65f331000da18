package loadgen

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// settling returns a service time that starts at first and drops by a
// millisecond every step until it reaches 1 ms: a target that warms up.
func settling(t0 time.Time, first time.Duration, step time.Duration) func(time.Time) time.Duration {
	return func(now time.Time) time.Duration {
		d := first - time.Duration(now.Sub(t0)/step)*time.Millisecond
		return max(d, time.Millisecond)
	}
}

func TestWindowsStopWhenTheTargetSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Service 4, 3, 2 ms in the first three 100 ms, then 1 ms for good:
		// windows 0-2 differ, 3-5 agree, so the run stops after six windows.
		t0 := time.Now()
		f := &fakeTarget{Workers: 1, ServiceAt: settling(t0, 4*time.Millisecond, 100*time.Millisecond)}
		var boundaries []int
		w, err := RunWindows(t.Context(), f, Spec{Mode: Closed, Concurrency: 1},
			WindowSpec{Duration: 100 * time.Millisecond, Requests: 10, Stability: 5, MaxWindows: 10,
				OnBoundary: func(i int) { boundaries = append(boundaries, i) }})
		require.NoError(t, err)
		require.Len(t, w.Windows, 6)
		assert.True(t, w.Stable)
		assert.Equal(t, []int{0, 1, 2, 3, 4, 5}, boundaries)
		for i, win := range w.Windows {
			assert.GreaterOrEqual(t, win.Elapsed, 100*time.Millisecond, "window %d", i)
			assert.GreaterOrEqual(t, win.Completed, 10, "window %d", i)
			if i > 0 {
				assert.Equal(t, w.Windows[i-1].End, win.Start, "window %d starts where %d ended", i, i-1)
			}
		}
		// The settled windows: one request per millisecond, exactly.
		for _, win := range w.Windows[3:] {
			assert.Equal(t, 100*time.Millisecond, win.Elapsed)
			assert.Equal(t, 100, win.Completed)
			assert.Equal(t, 1000.0, win.Throughput(1))
		}
		final := w.Final()
		assert.Equal(t, 300, final.Completed)
		assert.Equal(t, 300*time.Millisecond, final.Elapsed)
		assert.Equal(t, 8000.0, final.Throughput(8))
		assert.Equal(t, w.Windows[3].Start, final.Start)
		assert.Equal(t, w.Windows[5].End, final.End)
		// Every request sent was answered, in a window or after the last.
		assert.Equal(t, w.Result.Sent, w.Result.Completed)
		assert.GreaterOrEqual(t, w.Result.Completed, 3*25+300)
	})
}

func TestWindowsReportUnstableAfterMaxWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 1 ms and 3 ms in turn, every 100 ms: no three windows agree.
		t0 := time.Now()
		f := &fakeTarget{Workers: 1, ServiceAt: func(now time.Time) time.Duration {
			if now.Sub(t0)/(100*time.Millisecond)%2 == 0 {
				return time.Millisecond
			}
			return 3 * time.Millisecond
		}}
		w, err := RunWindows(t.Context(), f, Spec{Mode: Closed, Concurrency: 1},
			WindowSpec{Duration: 100 * time.Millisecond, Requests: 10, MaxWindows: 5})
		require.NoError(t, err)
		assert.Len(t, w.Windows, 5)
		assert.False(t, w.Stable)
	})
}

func TestWindowsHoldTheMinimumRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 50 ms a request and at least 5 a window: each window lasts 250 ms,
		// far beyond its 10 ms minimum. The warm-up request stays outside.
		f := &fakeTarget{Workers: 1, Service: 50 * time.Millisecond}
		t0 := time.Now()
		w, err := RunWindows(t.Context(), f, Spec{Mode: Closed, Concurrency: 1, Warmup: true},
			WindowSpec{Duration: 10 * time.Millisecond, Requests: 5})
		require.NoError(t, err)
		require.Len(t, w.Windows, 3, "a steady target agrees at once")
		assert.True(t, w.Stable)
		assert.Equal(t, 50*time.Millisecond, w.Result.Warmup)
		assert.Equal(t, t0.Add(50*time.Millisecond), w.Windows[0].Start, "the first window starts after the warm-up")
		for i, win := range w.Windows {
			assert.Equal(t, 5, win.Completed, "window %d", i)
			assert.Equal(t, 250*time.Millisecond, win.Elapsed, "window %d", i)
			assert.Equal(t, 50*time.Millisecond, win.Latency.Max(), "window %d", i)
		}
	})
}

func TestWindowsUnderOpenLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTarget{Service: time.Millisecond}
		w, err := RunWindows(t.Context(), f, Spec{Mode: Open, Rate: 1000},
			WindowSpec{Duration: 100 * time.Millisecond, Requests: 10})
		require.NoError(t, err)
		require.Len(t, w.Windows, 3)
		assert.True(t, w.Stable)
		for i, win := range w.Windows {
			// Sends every millisecond; a response due on the boundary may land
			// on either side of it.
			// The first window's sends run from 0 to 100 ms inclusive: the
			// window ends after the send that finds it 100 ms long.
			wantSent := 100
			if i == 0 {
				wantSent = 101
			}
			assert.Equal(t, wantSent, win.Sent, "window %d", i)
			assert.Zero(t, win.Late, "window %d", i)
			assert.InDelta(t, 100, win.Completed, 1, "window %d", i)
			assert.Equal(t, time.Millisecond, win.Latency.Max(), "window %d", i)
		}
	})
}

func TestBurstWindowsGrowUntilLongEnough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 1 ms a request, one at a time: a burst of 10 lasts 10 ms, too short
		// for 50 ms windows; the next bursts have ceil(10*1.1*50/10) = 55.
		f := &fakeTarget{Workers: 1, Service: time.Millisecond}
		var boundaries []int
		w, err := RunWindows(t.Context(), f, Spec{Mode: Burst, Warmup: true},
			WindowSpec{Duration: 50 * time.Millisecond, Requests: 10,
				OnBoundary: func(i int) { boundaries = append(boundaries, i) }})
		require.NoError(t, err)
		require.Len(t, w.Windows, 3)
		assert.True(t, w.Stable)
		assert.Equal(t, []int{-1, 0, 1, 2}, boundaries)
		for i, win := range w.Windows {
			assert.Equal(t, 55, win.Completed, "window %d", i)
			assert.Equal(t, 55*time.Millisecond, win.Elapsed, "window %d", i)
			// The seed's burst semantics: the k-th request waits for k-1 others.
			assert.Equal(t, time.Millisecond, win.Latency.Min(), "window %d", i)
			assert.Equal(t, 55*time.Millisecond, win.Latency.Max(), "window %d", i)
		}
		assert.Equal(t, 10+3*55, w.Result.Sent)
		assert.Equal(t, 10+3*55, w.Result.Completed)
		assert.Equal(t, time.Millisecond, w.Result.Warmup)
		assert.Len(t, f.requests(), 1+10+3*55)
	})
}

func TestWindowSpecRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    WindowSpec
		want string
	}{
		{"no duration", WindowSpec{}, "window Duration 0s"},
		{"negative requests", WindowSpec{Duration: time.Second, Requests: -1}, "window Requests -1"},
		{"negative stability", WindowSpec{Duration: time.Second, Stability: -5}, "window Stability -5"},
		{"two windows", WindowSpec{Duration: time.Second, MaxWindows: 2}, "MaxWindows 2 (want at least 3"},
		{"quantile above 1", WindowSpec{Duration: time.Second, Quantile: 1.5}, "window Quantile 1.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RunWindows(t.Context(), &fakeTarget{}, Spec{Mode: Closed}, tc.w)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestAgree(t *testing.T) {
	win := func(completed int, lat time.Duration) Window {
		w := Window{Elapsed: time.Second, Completed: completed}
		for range completed {
			w.Latency.Record(lat)
		}
		return w
	}
	for _, tc := range []struct {
		name string
		ws   []Window
		want bool
	}{
		{"two windows", []Window{win(100, time.Millisecond), win(100, time.Millisecond)}, false},
		{"equal", []Window{win(100, time.Millisecond), win(100, time.Millisecond), win(100, time.Millisecond)}, true},
		{"throughput 5 % apart", []Window{win(100, time.Millisecond), win(105, time.Millisecond), win(102, time.Millisecond)}, true},
		{"throughput 6 % apart", []Window{win(100, time.Millisecond), win(106, time.Millisecond), win(102, time.Millisecond)}, false},
		{"latency 10 % apart", []Window{win(100, time.Millisecond), win(100, 1100*time.Microsecond), win(100, time.Millisecond)}, false},
		{"only the last three count", []Window{win(1, time.Second), win(100, time.Millisecond), win(100, time.Millisecond), win(100, time.Millisecond)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Agree(tc.ws, 5, 0.5))
		})
	}
}

package loadgen

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScenarioNames(t *testing.T) {
	for _, tc := range []struct {
		s       Scenario
		name    string
		samples int
		mode    Mode
	}{
		{SingleStream, "SingleStream", 1, Closed},
		{MultiStream, "MultiStream", 8, Closed},
		{Server, "Server", 1, Open},
		{Offline, "Offline", 0, Burst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.name, tc.s.String())
			got, err := ParseScenario(tc.name)
			require.NoError(t, err)
			assert.Equal(t, tc.s, got)
			assert.Equal(t, tc.samples, tc.s.Samples())
			assert.Equal(t, tc.mode, tc.s.Load(100, 1).Mode)
		})
	}
	_, err := ParseScenario("singlestream")
	assert.ErrorContains(t, err, `unknown scenario "singlestream" (want SingleStream, MultiStream, Server or Offline)`)
	assert.Equal(t, "Scenario(9)", Scenario(9).String())
}

// latencies returns a window of n completions with latencies 1, 2, ..., n ms
// over one second.
func latencies(n int) Window {
	w := Window{Elapsed: time.Second, Completed: n}
	for i := 1; i <= n; i++ {
		w.Latency.Record(time.Duration(i) * time.Millisecond)
	}
	return w
}

func TestScenarioJudge(t *testing.T) {
	w := latencies(100)
	failed := latencies(100)
	failed.Failed = 1
	// The quantiles of 1..100 ms are within metrics.RelativeError of 90 and
	// 99 ms; the bounds below sit clear of that.
	for _, tc := range []struct {
		name     string
		s        Scenario
		w        Window
		samples  int
		bound    Bound
		quantile float64
		latency  time.Duration
		tput     float64
		verdict  string
	}{
		{"SingleStream reports p90", SingleStream, w, 1, Bound{}, 0.9, 90 * time.Millisecond, 100, ""},
		{"MultiStream reports p99 of queries", MultiStream, w, 8, Bound{}, 0.99, 99 * time.Millisecond, 800, ""},
		{"Server within its bound", Server, w, 1, Bound{0.99, 100 * time.Millisecond}, 0.99, 99 * time.Millisecond, 100, "VALID"},
		{"Server over its bound", Server, w, 1, Bound{0.99, 98 * time.Millisecond}, 0.99, 99 * time.Millisecond, 100, "INVALID"},
		{"Server p90 bound", Server, w, 1, Bound{0.9, 95 * time.Millisecond}, 0.9, 90 * time.Millisecond, 100, "VALID"},
		{"Server with a failed query", Server, failed, 1, Bound{0.99, time.Second}, 0.99, 99 * time.Millisecond, 100, "INVALID"},
		{"Offline reports samples/s", Offline, w, 32, Bound{}, 0, 0, 3200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.s.Judge(&tc.w, tc.samples, tc.bound)
			assert.Equal(t, tc.quantile, o.Quantile)
			assert.InEpsilon(t, float64(max(tc.latency, 1)), float64(max(o.Latency, 1)), 1.0/256)
			assert.Equal(t, tc.tput, o.Throughput)
			assert.Equal(t, tc.verdict, o.Verdict())
			assert.Equal(t, tc.verdict != "", o.Judged)
		})
	}
}

func TestServerScenarioVerdictOnLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		service time.Duration
		verdict string
	}{
		// 100 req/s on one worker: 2 ms of service keeps p99 far below
		// 10 ms; 12 ms cannot keep up, and the queue grows without end.
		{"keeps up", 2 * time.Millisecond, "VALID"},
		{"falls behind", 12 * time.Millisecond, "INVALID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeTarget{Workers: 1, Service: tc.service}
				r, err := Run(t.Context(), f, Server.Load(100, 7), 500)
				require.NoError(t, err)
				w := r.Window()
				o := Server.Judge(&w, 1, Bound{Quantile: 0.99, Latency: 10 * time.Millisecond})
				assert.Equal(t, tc.verdict, o.Verdict(), "p99 %v", o.Latency)
			})
		})
	}
}

func TestSingleStreamKeepsOneQueryOutstanding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTarget{Service: time.Millisecond}
		r, err := Run(t.Context(), f, SingleStream.Load(0, 0), 20)
		require.NoError(t, err)
		assert.Equal(t, 1, f.maxOut)
		assert.Equal(t, 20*time.Millisecond, r.Elapsed())
	})
}

func TestResultWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTarget{Workers: 1, Service: time.Millisecond,
			WaitErr: func(i int) error { return errIf(i == 3, "lost") }}
		t0 := time.Now()
		r, err := Run(t.Context(), f, Spec{Mode: Burst}, 10)
		require.NoError(t, err)
		w := r.Window()
		assert.Equal(t, t0, w.Start)
		assert.Equal(t, t0.Add(10*time.Millisecond), w.End)
		assert.Equal(t, 10*time.Millisecond, w.Elapsed)
		assert.Equal(t, 9, w.Completed)
		assert.Equal(t, 1, w.Failed)
		assert.Equal(t, int64(9), w.Latency.Count())
		require.Len(t, r.Errs, 1)
		assert.EqualError(t, r.Errs[0], "lost")
	})
}

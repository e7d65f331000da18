package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/metrics"
)

func TestModeString(t *testing.T) {
	tests := []struct {
		m    Mode
		want string
	}{
		{Burst, "burst"},
		{Closed, "closed"},
		{Open, "open"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.m.String())
		got, err := ParseMode(tt.want)
		require.NoError(t, err)
		assert.Equal(t, tt.m, got, "ParseMode(%q)", tt.want)
	}
	assert.Equal(t, "Mode(7)", Mode(7).String())
	_, err := ParseMode("poisson")
	assert.ErrorContains(t, err, `loadgen: unknown mode "poisson"`)
}

func TestStartRejects(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	failing := &fakeTarget{WaitErr: func(int) error { return errors.New("no model") }}
	tests := []struct {
		name string
		ctx  context.Context
		t    Target
		spec Spec
		want string
	}{
		{"nil target", context.Background(), nil, Spec{}, "nil Target"},
		{"unknown mode", context.Background(), &fakeTarget{}, Spec{Mode: 5}, "unknown Mode(5)"},
		{"negative concurrency", context.Background(), &fakeTarget{}, Spec{Mode: Closed, Concurrency: -1}, "Concurrency -1"},
		{"zero rate", context.Background(), &fakeTarget{}, Spec{Mode: Open}, "Rate 0"},
		{"NaN rate", context.Background(), &fakeTarget{}, Spec{Mode: Open, Rate: math.NaN()}, "Rate NaN"},
		{"infinite rate", context.Background(), &fakeTarget{}, Spec{Mode: Open, Rate: math.Inf(1)}, "Rate +Inf"},
		{"negative LateAfter", context.Background(), &fakeTarget{}, Spec{Mode: Open, Rate: 1, LateAfter: -1}, "negative LateAfter"},
		{"cancelled context", cancelled, &fakeTarget{}, Spec{}, "context canceled"},
		{"warm-up fails", context.Background(), failing, Spec{Warmup: true}, "loadgen: warm-up request: no model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Start(tt.ctx, tt.t, tt.spec)
			assert.Nil(t, g)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func TestBurstSeedSemantics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			n       = 10
			batch   = 4
			service = 10 * time.Millisecond
		)
		f := &fakeTarget{Service: service, Workers: 1}
		t0 := time.Now()
		r, err := Run(t.Context(), f, Spec{Mode: Burst, Warmup: true}, n)
		require.NoError(t, err)

		reqs := f.requests()
		require.Len(t, reqs, n+1)
		assert.Equal(t, t0, reqs[0].Sent, "warm-up sent first")
		assert.Equal(t, t0.Add(service), reqs[0].Done)
		for i, q := range reqs[1:] {
			// Every counted request goes back to back, after the warm-up's response.
			assert.Equal(t, reqs[0].Done, q.Sent, "request %d sent at %v", i, q.Sent.Sub(t0))
			assert.Equal(t, q.Sent, q.At, "burst intends to send now")
		}

		assert.Equal(t, service, r.Warmup)
		assert.Equal(t, n, r.Sent)
		assert.Equal(t, n, r.Completed)
		assert.Zero(t, r.Failed)
		assert.Zero(t, r.Late)
		assert.Equal(t, t0.Add(service), r.FirstSend)
		assert.Equal(t, t0.Add((n+1)*service), r.LastDone)
		assert.Equal(t, n*service, r.Elapsed())
		// The seed's formula: n*batch / (last response - first send), exact on fake time.
		assert.Equal(t, float64(n*batch)/(n*service).Seconds(), r.Throughput(batch))
		assert.Equal(t, 400.0, r.Throughput(batch))

		// The i-th request (from 1) queues behind i-1 others: latency i*service.
		s := r.Latency.Summary()
		assert.Equal(t, int64(n), s.Count)
		assert.Equal(t, service, s.Min)
		assert.Equal(t, n*service, s.Max)
		assert.Equal(t, 55*time.Millisecond, s.Mean)
	})
}

func TestBurstWithoutWarmup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTarget{Service: time.Millisecond}
		t0 := time.Now()
		r, err := Run(t.Context(), f, Spec{Mode: Burst}, 5)
		require.NoError(t, err)
		assert.Len(t, f.requests(), 5)
		assert.Zero(t, r.Warmup)
		assert.Equal(t, t0, r.FirstSend)
		assert.Equal(t, 5, f.maxOut, "all five outstanding at once")
		assert.Equal(t, time.Millisecond, r.Elapsed())
	})
}

func TestClosedLoop(t *testing.T) {
	const service = 10 * time.Millisecond
	tests := []struct {
		name        string
		concurrency int // Spec.Concurrency
		c           int // effective
		workers     int
		n           int
	}{
		{"default is one", 0, 1, 1, 6},
		{"C=4 serial server", 4, 4, 1, 20},
		{"C=3 parallel server", 3, 3, 0, 12},
		{"C above n", 16, 16, 0, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeTarget{Service: service, Workers: tt.workers}
				t0 := time.Now()
				r, err := Run(t.Context(), f, Spec{Mode: Closed, Concurrency: tt.concurrency}, tt.n)
				require.NoError(t, err)
				require.Equal(t, tt.n, r.Completed)

				reqs := f.requests()
				require.Len(t, reqs, tt.n)
				assert.Equal(t, min(tt.c, tt.n), f.maxOut, "never more than C outstanding")
				for i, q := range reqs {
					assert.LessOrEqual(t, q.OutNow, tt.c, "outstanding after send %d", i)
					if i < tt.c || tt.workers == 1 {
						// Saturated: each admission brings the count back to exactly C
						// (with one completion at a time, so the count is exact).
						assert.Equal(t, min(i+1, tt.c), q.OutNow, "outstanding after send %d", i)
					}
					var want time.Time
					switch {
					case i < tt.c:
						want = t0 // the first C go at once
					case tt.workers == 1:
						want = t0.Add(time.Duration(i-tt.c+1) * service) // one completes per service time
					default:
						want = t0.Add(time.Duration(i/tt.c) * service) // C complete together
					}
					assert.Equal(t, want, q.Sent, "send %d at %v", i, q.Sent.Sub(t0))
					assert.Equal(t, q.Sent, q.At)
				}
				if tt.workers == 1 {
					// Past the ramp, each request waits for C services.
					assert.Equal(t, time.Duration(min(tt.c, tt.n))*service, r.Latency.Max())
					assert.Equal(t, time.Duration(tt.n)*service, r.Elapsed())
				} else {
					assert.Equal(t, service, r.Latency.Max())
					assert.Equal(t, service, r.Latency.Min())
				}
			})
		})
	}
}

func TestOpenConstantRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 50
		f := &fakeTarget{Service: 100 * time.Microsecond}
		t0 := time.Now()
		r, err := Run(t.Context(), f, Spec{Mode: Open, Rate: 1000}, n)
		require.NoError(t, err)

		for i, q := range f.requests() {
			want := t0.Add(time.Duration(i) * time.Millisecond)
			assert.Equal(t, want, q.At, "request %d scheduled", i)
			assert.Equal(t, want, q.Sent, "request %d sent at its scheduled instant", i)
		}
		assert.Equal(t, n, r.Sent)
		assert.Zero(t, r.Late)
		assert.Zero(t, r.LateShare())
		assert.Equal(t, 100*time.Microsecond, r.Latency.Max())
		assert.Equal(t, 100*time.Microsecond, r.Latency.Min())
		assert.Equal(t, (n-1)*time.Millisecond+100*time.Microsecond, r.Elapsed())
	})
}

func TestOpenFractionalRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 3 per second: due times are rounded from i/3 s, never accumulating error.
		f := &fakeTarget{}
		t0 := time.Now()
		_, err := Run(t.Context(), f, Spec{Mode: Open, Rate: 3}, 301)
		require.NoError(t, err)
		reqs := f.requests()
		assert.Equal(t, t0.Add(100*time.Second), reqs[300].At)
		assert.Equal(t, t0.Add(333_333_333), reqs[1].At)
	})
}

// TestOpenStall checks that latency counts from the scheduled time when the
// target stalls for a second: the requests scheduled during the stall show
// latencies up to about one second, and a generator measuring from the actual
// send time would not see them (coordinated omission).
func TestOpenStall(t *testing.T) {
	const (
		n       = 300
		gap     = 10 * time.Millisecond // 100 requests/s
		service = time.Millisecond
		stalled = 100 // index of the first request scheduled in the stall
	)
	tests := []struct {
		name     string
		admit    bool // Send blocks (the server admits nothing) rather than responses being held
		wantLate int
		over500  int64 // requests with a latency above 0.5 s
	}{
		{"admission stall", true, 99, 51},
		{"response stall", false, 0, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				stallStart := t0.Add(stalled * gap)
				f := &fakeTarget{Service: service}
				if tt.admit {
					f.SendDelay = func(i int) time.Duration {
						if i == stalled {
							return time.Second
						}
						return 0
					}
				} else {
					f.HoldFrom, f.HoldUntil = stallStart, stallStart.Add(time.Second)
				}
				r, err := Run(t.Context(), f, Spec{Mode: Open, Rate: float64(time.Second / gap)}, n)
				require.NoError(t, err)
				require.Equal(t, n, r.Completed)
				assert.Equal(t, tt.wantLate, r.Late)

				reqs := f.requests()
				var fromSchedule, fromSend metrics.Histogram
				for i, q := range reqs {
					assert.Equal(t, t0.Add(time.Duration(i)*gap), q.At, "request %d keeps its schedule", i)
					fromSchedule.Record(q.Done.Sub(q.At))
					fromSend.Record(q.Done.Sub(q.Sent))
					if i >= stalled && i < stalled+100 {
						// Scheduled j gaps into the stall, answered when it ends.
						j := time.Duration(i - stalled)
						want := time.Second + service - j*gap
						if !tt.admit {
							want = time.Second - j*gap
						}
						assert.Equal(t, want, q.Done.Sub(q.At), "latency of request %d", i)
					}
				}
				assert.Equal(t, fromSchedule.Summary(), r.Latency.Summary(), "latency measured from the schedule")
				assert.GreaterOrEqual(t, r.Latency.Max(), time.Second)
				assert.LessOrEqual(t, r.Latency.Max(), time.Second+service)
				assert.Equal(t, tt.over500, countAbove(reqs, 500*time.Millisecond), "half the stall's requests wait over 0.5 s")
				if tt.admit {
					// Measured from the actual send, the stall all but disappears.
					assert.Less(t, fromSend.Quantile(0.99), 2*service)
				}
			})
		})
	}
}

func countAbove(reqs []fakeReq, d time.Duration) int64 {
	var n int64
	for _, q := range reqs {
		if q.Done.Sub(q.At) > d {
			n++
		}
	}
	return n
}

func TestOpenLateSends(t *testing.T) {
	tests := []struct {
		name      string
		lateAfter time.Duration
		want      int
	}{
		// Request 3 blocks Send for 3.5 ms: requests 4, 5, 6 go 2.5, 1.5, 0.5 ms late.
		{"default 1ms", 0, 2},
		{"2ms", 2 * time.Millisecond, 1},
		{"exactly 2.5ms is on time", 2500 * time.Microsecond, 0},
		{"10ms", 10 * time.Millisecond, 0},
		{"100µs", 100 * time.Microsecond, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeTarget{SendDelay: func(i int) time.Duration {
					if i == 3 {
						return 3500 * time.Microsecond
					}
					return 0
				}}
				t0 := time.Now()
				r, err := Run(t.Context(), f, Spec{Mode: Open, Rate: 1000, LateAfter: tt.lateAfter}, 10)
				require.NoError(t, err)
				assert.Equal(t, tt.want, r.Late)
				assert.Equal(t, float64(tt.want)/10, r.LateShare())
				reqs := f.requests()
				for i := 4; i <= 6; i++ {
					assert.Equal(t, t0.Add(6500*time.Microsecond), reqs[i].Sent, "late request %d goes at once", i)
				}
				assert.Equal(t, t0.Add(7*time.Millisecond), reqs[7].Sent, "back on schedule, nothing skipped")
			})
		})
	}
}

func TestOpenPoisson(t *testing.T) {
	const (
		n    = 20_000
		rate = 1000.0
	)
	schedule := func(t *testing.T, seed uint64) []time.Duration {
		var gaps []time.Duration
		synctest.Test(t, func(t *testing.T) {
			f := &fakeTarget{Service: 50 * time.Microsecond}
			r, err := Run(t.Context(), f, Spec{Mode: Open, Rate: rate, Poisson: true, Seed: seed}, n)
			require.NoError(t, err)
			require.Equal(t, n, r.Completed)
			assert.Zero(t, r.Late, "a prompt target never makes sends late")
			reqs := f.requests()
			for i := 1; i < len(reqs); i++ {
				require.Equal(t, reqs[i].At, reqs[i].Sent, "request %d sent at its scheduled instant", i)
				gaps = append(gaps, reqs[i].At.Sub(reqs[i-1].At))
			}
		})
		return gaps
	}

	gaps := schedule(t, 42)
	var sum, sum2 float64
	for _, g := range gaps {
		s := g.Seconds()
		sum += s
		sum2 += s * s
	}
	mean := sum / float64(len(gaps))
	std := math.Sqrt(sum2/float64(len(gaps)) - mean*mean)
	// Exponential gaps: mean 1/rate, std equal to the mean. With 20,000 gaps the
	// standard error of the mean is 0.7%.
	assert.InEpsilon(t, 1/rate, mean, 0.03, "mean gap %v s", mean)
	assert.InEpsilon(t, mean, std, 0.05, "gap std %v s, mean %v s", std, mean)

	assert.Equal(t, gaps, schedule(t, 42), "same seed, same schedule")
	assert.NotEqual(t, gaps[:100], schedule(t, 43)[:100], "another seed, another schedule")
}

func TestErrorsCounted(t *testing.T) {
	tests := []struct {
		name     string
		sendErr  func(i int) error
		waitErr  func(i int) error
		failed   int
		wantErrs []string // nil: only check the count
		numErrs  int
	}{
		{
			name:     "repeated errors kept once",
			sendErr:  func(i int) error { return errIf(i%5 == 0, "queue full") },
			waitErr:  func(i int) error { return errIf(i%5 == 1, "boom") },
			failed:   20,
			wantErrs: []string{"queue full", "boom"},
			numErrs:  2,
		},
		{
			name:    "at most eight distinct",
			sendErr: func(i int) error { return errIf(i%2 == 0, fmt.Sprintf("reject %d", i)) },
			failed:  25,
			numErrs: 8,
		},
		{
			name:     "panic in wait becomes an error",
			waitErr:  func(i int) error { return panicIf(i == 7) },
			failed:   1,
			wantErrs: []string{"loadgen: waiting for a response panicked: injected"},
			numErrs:  1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeTarget{Service: time.Millisecond, SendErr: tt.sendErr, WaitErr: tt.waitErr}
				r, err := Run(t.Context(), f, Spec{Mode: Burst}, 50)
				require.NoError(t, err)
				assert.Equal(t, 50, r.Sent)
				assert.Equal(t, tt.failed, r.Failed)
				assert.Equal(t, 50-tt.failed, r.Completed)
				assert.Equal(t, int64(r.Completed), r.Latency.Count(), "failed requests are not in Latency")
				require.Len(t, r.Errs, tt.numErrs)
				if tt.wantErrs != nil {
					var msgs []string
					for _, e := range r.Errs {
						msgs = append(msgs, e.Error())
					}
					assert.Equal(t, tt.wantErrs, msgs)
				}
				seen := map[string]bool{}
				for _, e := range r.Errs {
					assert.False(t, seen[e.Error()], "duplicate error %v", e)
					seen[e.Error()] = true
				}
			})
		})
	}
}

func errIf(cond bool, msg string) error {
	if cond {
		return errors.New(msg)
	}
	return nil
}

func panicIf(cond bool) error {
	if cond {
		panic("injected")
	}
	return nil
}

func TestCancel(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		sent int // requests sent before the cancel at 500 ms
	}{
		// A slow target (2 s) keeps the single closed-loop slot busy.
		{"closed waiting for a slot", Spec{Mode: Closed, Concurrency: 1}, 1},
		// At 1 request/s the second send is due at 1 s.
		{"open sleeping until due", Spec{Mode: Open, Rate: 1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				t0 := time.Now()
				time.AfterFunc(500*time.Millisecond, cancel)
				f := &fakeTarget{Service: 2 * time.Second}
				r, err := Run(ctx, f, tt.spec, 10)
				assert.ErrorIs(t, err, context.Canceled)
				assert.Equal(t, tt.sent, r.Sent)
				assert.Equal(t, tt.sent, r.Completed, "Finish still waits for what was sent")
				assert.Equal(t, t0.Add(2*time.Second), time.Now())
			})
		})
	}
}

func TestFinishIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeTarget{Service: time.Millisecond, WaitErr: func(int) error { return errors.New("x") }}
		g, err := Start(t.Context(), f, Spec{Mode: Closed, Concurrency: 2})
		require.NoError(t, err)
		for range 3 {
			require.NoError(t, g.Next())
		}
		r1 := g.Finish()
		r1.Errs[0] = nil // the caller owns its copy
		r2 := g.Finish()
		assert.Equal(t, 3, r2.Sent)
		assert.Equal(t, 3, r2.Failed)
		assert.EqualError(t, r2.Errs[0], "x")
		assert.ErrorIs(t, g.Next(), ErrFinished)
	})
}

func TestResultZero(t *testing.T) {
	var r Result
	assert.Zero(t, r.Elapsed())
	assert.Zero(t, r.Throughput(32))
	assert.Zero(t, r.LateShare())
}

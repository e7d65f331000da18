package inference_test

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/nop"
)

// TestNilContextIsAnError (issue 15, item 6): a nil context is a clear error,
// as net/http's "nil Context", not a panic.
func TestNilContextIsAnError(t *testing.T) {
	s := faultyServer(t, &faulty{}, inference.Config{})
	in := inference.NewInput(1, 32, 32)
	var nilCtx context.Context
	tests := []struct {
		name string
		call func() error
	}{
		{"Submit", func() error { _, err := s.Submit(nilCtx, inference.Request{Input: in}); return err }},
		{"Infer", func() error { _, err := s.Infer(nilCtx, in); return err }},
		{"Shutdown", func() error { return s.Shutdown(nilCtx) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tt.call() })
			assert.EqualError(t, err, "inference: nil Context")
		})
	}
	st := s.Stats()
	assert.Equal(t, uint64(2), st.Rejected, "Submit and Infer count as rejected")
	assert.Zero(t, st.Accepted)
	_, err := s.Infer(context.Background(), in)
	assert.NoError(t, err, "the server still serves")
}

// TestAbsurdConfigIsAnError (issue 15, item 7): sizes that would exhaust
// memory or overflow are an error naming the field and its bound, not a crash.
func TestAbsurdConfigIsAnError(t *testing.T) {
	tests := []struct {
		name string
		cfg  inference.Config
		want string
	}{
		{"MaxBatch", inference.Config{
			Options: inference.Options{MaxBatch: 1 << 40}}, "inference: Config.MaxBatch = 1099511627776, want 1..4096"},
		{"MaxQueue", inference.Config{MaxQueue: 1 << 40}, "inference: Config.MaxQueue = 1099511627776, want 1..1048576"},
		{"Slots", inference.Config{
			Options: inference.Options{Slots: 1 << 40}}, "inference: Config.Slots = 1099511627776, want 1..16"},
		{"Workers", inference.Config{
			Options: inference.Options{Workers: 1 << 40}}, "inference: Config.Workers = 1099511627776, want 1..256"},
		{"Height", inference.Config{
			Options: inference.Options{Height: 1 << 31, Width: 32}}, "inference: Config.Height = 2147483648, want 1..8192"},
		{"Width", inference.Config{
			Options: inference.Options{Height: 32, Width: 1 << 31}}, "inference: Config.Width = 2147483648, want 1..8192"},
		{"negative", inference.Config{
			Options: inference.Options{Workers: -1}}, "inference: Config.Workers = -1, want 1..256"},
		{"IdlePoll negative", inference.Config{IdlePoll: -time.Microsecond}, "inference: IdlePoll -1µs outside 0..10ms"},
		{"IdlePoll too long", inference.Config{IdlePoll: time.Second}, "inference: IdlePoll 1s outside 0..10ms"},
		{"batch values", inference.Config{
			Options: inference.Options{MaxBatch: 4096, Height: 8192, Width: 8192}},
			"inference: Config.MaxBatch x channels x Height x Width = 4096 x 3 x 8192 x 8192 values, want at most 2147483648"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Backend, cfg.Model = nop.New(), tinyModel(t)
			if cfg.Height == 0 {
				cfg.Height, cfg.Width = 32, 32
			}
			s, err := inference.New(cfg)
			if s != nil {
				s.Close()
			}
			assert.EqualError(t, err, tt.want)
		})
	}
}

// TestCancelledWhileQueuedLeavesAtOnce (issue 15, item 8): a queued call whose
// context ends is answered then, not when a worker reaches it, and frees its
// queue slot for the Reject and Block policies alike, without a goroutine per
// queued request.
func TestCancelledWhileQueuedLeavesAtOnce(t *testing.T) {
	for _, policy := range []inference.QueuePolicy{inference.Reject, inference.Block} {
		t.Run(policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &faulty{gate: make(chan struct{})}
				s := faultyServer(t, f, inference.Config{MaxQueue: 2, QueuePolicy: policy})
				submit := func(ctx context.Context) (*inference.Call, error) {
					return s.Submit(ctx, inference.Request{Input: inference.NewInput(1, 32, 32)})
				}
				first, err := submit(context.Background()) // held by the worker at the gate
				require.NoError(t, err)
				synctest.Wait()
				ctx, cancel := context.WithCancel(context.Background())
				cancelled, err := submit(ctx)
				require.NoError(t, err)
				expiring, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32), Timeout: 5 * time.Millisecond})
				require.NoError(t, err)
				require.Equal(t, 2, s.Stats().Queued, "the queue is full")

				// A third request is refused (Reject) or waits for room (Block).
				var blocked chan *inference.Call
				if policy == inference.Reject {
					_, err = submit(context.Background())
					require.ErrorIs(t, err, inference.ErrQueueFull)
				} else {
					blocked = make(chan *inference.Call)
					go func() {
						c, err := submit(context.Background())
						assert.NoError(t, err)
						blocked <- c
					}()
					synctest.Wait()
				}

				cancel()
				synctest.Wait()
				require.True(t, isDone(cancelled), "answered when its context ended, with the worker still busy")
				assert.ErrorIs(t, cancelled.Err(), context.Canceled)
				time.Sleep(5 * time.Millisecond)
				synctest.Wait()
				require.True(t, isDone(expiring), "answered when its deadline passed")
				assert.ErrorIs(t, expiring.Err(), context.DeadlineExceeded)

				// Both slots are free again.
				later := []*inference.Call{first}
				if blocked != nil {
					later = append(later, <-blocked)
				}
				for len(later) < 3 {
					c, err := submit(context.Background())
					require.NoError(t, err)
					later = append(later, c)
				}
				assert.Equal(t, 2, s.Stats().Queued)
				assert.False(t, isDone(first), "the first request is still at the gate")

				close(f.gate)
				for i, c := range later {
					assert.NoError(t, c.Err(), "request %d", i)
				}
				st := s.Stats()
				assert.Equal(t, uint64(1), st.Cancelled)
				assert.Equal(t, uint64(1), st.Expired)
				assert.Equal(t, uint64(3), st.Completed)
			})
		})
	}
}

func isDone(c *inference.Call) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

// TestQueuedRequestsNeedNoGoroutine: watching queued requests' contexts
// costs no goroutine per request while they wait.
func TestQueuedRequestsNeedNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faulty{gate: make(chan struct{})}
		s := faultyServer(t, f, inference.Config{MaxQueue: 1000})
		ctx, cancel := context.WithCancel(context.Background())
		_, err := s.Submit(ctx, inference.Request{Input: inference.NewInput(1, 32, 32)})
		require.NoError(t, err)
		synctest.Wait() // the worker holds it at the gate
		before := runtime.NumGoroutine()
		var calls []*inference.Call
		for range 500 {
			c, err := s.Submit(ctx, inference.Request{Input: inference.NewInput(1, 32, 32), Timeout: time.Hour})
			require.NoError(t, err)
			calls = append(calls, c)
		}
		assert.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines while 500 requests wait")
		cancel()
		for _, c := range calls {
			assert.ErrorIs(t, c.Err(), context.Canceled)
		}
		close(f.gate)
	})
}

// TestExpiredAtSubmitIsRefused (issue 15, item 9): a request whose deadline has
// already passed when Submit is called is always refused with
// context.DeadlineExceeded and counted as Rejected, whatever the policy.
func TestExpiredAtSubmitIsRefused(t *testing.T) {
	for _, policy := range []inference.QueuePolicy{inference.Block, inference.Reject} {
		t.Run(policy.String(), func(t *testing.T) {
			s := faultyServer(t, &faulty{}, inference.Config{QueuePolicy: policy})
			past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			defer cancel()
			const n = 200
			for i := range n {
				c, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32),
					Sent: time.Now().Add(-time.Second), Timeout: time.Millisecond})
				require.ErrorIs(t, err, context.DeadlineExceeded, "request %d (Sent + Timeout)", i)
				require.Nil(t, c)
				c, err = s.Submit(past, inference.Request{Input: inference.NewInput(1, 32, 32)})
				require.ErrorIs(t, err, context.DeadlineExceeded, "request %d (context deadline)", i)
				require.Nil(t, c)
			}
			st := s.Stats()
			assert.Equal(t, uint64(2*n), st.Rejected)
			assert.Zero(t, st.Accepted)
			assert.Zero(t, st.Expired)
		})
	}
}

// TestBackendByName: BackendName selects a registered back-end; a name
// nobody registered says which package to import (issue 19, item 1).
func TestBackendByName(t *testing.T) {
	s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 1}, BackendName: "nop", Model: tinyModel(t)})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, "nop", s.Config().BackendName)

	_, err = inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 1}, BackendName: "cuda", Model: tinyModel(t)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `no back-end "cuda" registered`)
	assert.Contains(t, err.Error(), `import the package that registers it, for this module's: _ "github.com/inferbench/inferbench/inference/cuda"`)

	s, err = inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 1}, Model: tinyModel(t)})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, "cpu", s.Config().BackendName, "the zero Config serves on the built-in cpu back-end")
}

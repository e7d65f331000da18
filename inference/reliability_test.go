package inference_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/loadgen"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
)

var soak = flag.Bool("soak", false, "run the memory soak tests (a million requests; minutes)")

func tinyModel(t testing.TB) *resnet.Model {
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	return m
}

// slow wraps the nop back-end so that every batch takes a fixed time to compute.
type slow struct{ service time.Duration }

func (s slow) Name() string { return "slow" }

func (s slow) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	e, err := nop.New().Open(m, opts)
	if err != nil {
		return nil, err
	}
	ws := e.Workers()
	for i, w := range ws {
		ws[i] = slowWorker{Worker: w, service: s.service}
	}
	return e, nil
}

type slowWorker struct {
	backend.Worker
	service time.Duration
}

func (w slowWorker) Compute(s, n int) error {
	time.Sleep(w.service)
	return w.Worker.Compute(s, n)
}

// timedTarget sends like Server.Target and records how long rejected sends took.
type timedTarget struct {
	s          *inference.Server
	in         inference.Tensor
	mu         sync.Mutex
	rejections int
	slowest    time.Duration
}

func (t *timedTarget) Send(ctx context.Context, at time.Time) (func() error, error) {
	start := time.Now()
	c, err := t.s.Submit(ctx, inference.Request{Input: t.in, Sent: at})
	if errors.Is(err, inference.ErrQueueFull) {
		t.mu.Lock()
		t.rejections++
		t.slowest = max(t.slowest, time.Since(start))
		t.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	return c.Err, nil
}

func TestOverloadAtTwiceCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// One worker at 1 ms a batch serves 1000 req/s; offer 2000 req/s.
		const service, maxQueue = time.Millisecond, 8
		s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 1}, Backend: slow{service}, Model: tinyModel(t),
			MaxQueue: maxQueue, QueuePolicy: inference.Reject})
		require.NoError(t, err)
		tt := &timedTarget{s: s, in: inference.NewInput(1, 32, 32)}
		res, err := loadgen.Run(context.Background(), tt, loadgen.Spec{Mode: loadgen.Open, Rate: 2000}, 2000)
		require.NoError(t, err)
		require.NoError(t, s.Shutdown(context.Background()))

		st := s.Stats()
		assert.Equal(t, 2000, res.Sent)
		assert.Equal(t, tt.rejections, res.Failed, "every failure is a queue-full rejection")
		assert.InDelta(t, 1000, tt.rejections, 50, "about half the offered load is rejected")
		assert.Zero(t, tt.slowest, "rejections are immediate")
		assert.Equal(t, st.Accepted, st.Completed, "exactly one response per accepted request")
		assert.Equal(t, uint64(res.Completed), st.Completed)
		bound := time.Duration(maxQueue+2) * service
		assert.LessOrEqual(t, res.Latency.Max(), bound, "accepted requests wait at most a full queue")
	})
}

func TestCancelledInFlightIsDiscarded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 2, Pipeline: inference.Overlap}, Backend: slow{10 * time.Millisecond}, Model: tinyModel(t)})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		c, err := s.Submit(ctx, inference.Request{Input: inference.NewInput(1, 32, 32)})
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond) // the batch is computing now
		cancel()
		assert.ErrorIs(t, c.Err(), context.Canceled)
		// The slot came back: later requests still run on every slot.
		for i := 0; i < 10; i++ {
			_, err := s.Infer(context.Background(), inference.NewInput(2, 32, 32))
			require.NoError(t, err)
		}
		st := s.Stats()
		assert.Equal(t, uint64(1), st.Cancelled)
		assert.Equal(t, uint64(10), st.Completed)
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

func FuzzSubmit(f *testing.F) {
	f.Add(1, 3, 32, 32, 3*32*32, -1)
	f.Add(2, 3, 32, 32, 2*3*32*32, 5)
	f.Add(0, 3, 32, 32, 0, -1)
	f.Add(1, 4, 32, 32, 4*32*32, -1)
	f.Add(9, 3, 32, 32, 9*3*32*32, -1)
	f.Add(1, 3, 31, 32, 3*31*32, -1)
	f.Add(-1, 3, 32, 32, 10, 0)
	s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 8}, Backend: nop.New(), Model: tinyModel(f), RejectNonFinite: true})
	require.NoError(f, err)
	defer s.Close()
	f.Fuzz(func(t *testing.T, n, c, h, w, length, nanAt int) {
		if length < 0 || length > 1<<20 {
			return
		}
		in := inference.Tensor{Shape: []int{n, c, h, w}, Data: make([]float32, length)}
		if nanAt >= 0 && nanAt < length {
			in.Data[nanAt] = float32(math.NaN())
		}
		resp, err := s.Infer(context.Background(), in)
		if err != nil {
			var ie *inference.InputError
			require.ErrorAs(t, err, &ie, "only input errors are expected")
			require.NotEmpty(t, ie.Want)
			require.NotEmpty(t, ie.Got)
			return
		}
		require.Equal(t, []int{n, 5}, resp.Logits.Shape)
		require.Len(t, resp.Logits.Data, n*5)
	})
}

// rss returns the resident set size in bytes, from /proc.
func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	pages, err := strconv.ParseInt(strings.Fields(string(b))[1], 10, 64)
	require.NoError(t, err)
	return pages * int64(os.Getpagesize())
}

// soakRun pushes n requests through the CPU back-end with a tiny model from
// four clients and returns the growth of resident memory and goroutines from
// after warm-up (the first n/10 requests) to the end. If leak is set, every
// response is kept, as a deliberately leaking caller would.
func soakRun(t *testing.T, n int, leak bool) (memGrowth, goroutineGrowth float64) {
	s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 1, Workers: 2, Pipeline: inference.Overlap}, Model: tinyModel(t)})
	require.NoError(t, err)
	defer s.Close()
	var kept [][]float32
	var keptMu sync.Mutex
	var next atomic.Int64
	var baseMem int64
	var baseG int
	var once sync.Once
	warm := int64(n / 10)
	var wg sync.WaitGroup
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := inference.NewInput(1, 32, 32)
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if i == warm {
					once.Do(func() {
						debug.FreeOSMemory()
						baseMem, baseG = rss(t), runtime.NumGoroutine()
					})
				}
				resp, err := s.Infer(context.Background(), in)
				if !assert.NoError(t, err) {
					return
				}
				if leak {
					keptMu.Lock()
					kept = append(kept, resp.Logits.Data)
					keptMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	debug.FreeOSMemory()
	endMem, endG := rss(t), runtime.NumGoroutine()
	t.Logf("requests %d (leak %v): rss %d -> %d bytes, goroutines %d -> %d, completed %d",
		n, leak, baseMem, endMem, baseG, endG, s.Stats().Completed)
	runtime.KeepAlive(kept)
	return float64(endMem-baseMem) / float64(baseMem), float64(endG-baseG) / float64(baseG)
}

func TestSoakMemoryStaysFlat(t *testing.T) {
	if !*soak {
		t.Skip("soak test: run with -soak (a million requests, minutes)")
	}
	mem, g := soakRun(t, 1_000_000, false)
	assert.LessOrEqual(t, mem, 0.05, "resident memory growth after warm-up")
	assert.LessOrEqual(t, g, 0.05, "goroutine growth after warm-up")
}

func TestSoakDetectsDeliberateLeak(t *testing.T) {
	if !*soak {
		t.Skip("soak test: run with -soak")
	}
	mem, _ := soakRun(t, 300_000, true)
	assert.Greater(t, mem, 0.05, "the leak control must trip the 5 % check")
}

// TestEveryDeviceLostAnswersEveryCall loses every device under concurrent
// Submits (issue 15, item 4): every accepted call must be answered, with
// logits, a worker error or ErrNoWorker wrapping the cause; Submits after the
// last worker left are refused at once; Shutdown returns.
func TestEveryDeviceLostAnswersEveryCall(t *testing.T) {
	tests := []struct {
		name string
		cfg  inference.Config
	}{
		{"serial", inference.Config{
			Options: inference.Options{Workers: 2}}},
		{"overlap", inference.Config{
			Options: inference.Options{Workers: 2, Pipeline: inference.Overlap}}},
		{"serial/batching", inference.Config{
			Options: inference.Options{Workers: 2}, MaxQueueDelay: 50 * time.Microsecond}},
		{"overlap/batching", inference.Config{
			Options: inference.Options{Workers: 2, Pipeline: inference.Overlap}, MaxQueueDelay: 50 * time.Microsecond}},
		{"overlap/batching/reject", inference.Config{
			Options: inference.Options{Workers: 1, Pipeline: inference.Overlap}, MaxQueueDelay: 50 * time.Microsecond, QueuePolicy: inference.Reject}},
		{"serial/idle-poll", inference.Config{
			Options: inference.Options{Workers: 2}, IdlePoll: 200 * time.Microsecond}},
		{"overlap/batching/idle-poll", inference.Config{
			Options: inference.Options{Workers: 2, Pipeline: inference.Overlap}, MaxQueueDelay: 50 * time.Microsecond, IdlePoll: 200 * time.Microsecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for round := range 20 {
				if !loseEveryDevice(t, tt.cfg) {
					t.Fatalf("round %d failed", round)
				}
			}
		})
	}
}

func loseEveryDevice(t *testing.T, cfg inference.Config) bool {
	f := &faulty{}
	cfg.MaxQueue = 16
	s := faultyServer(t, f, cfg)
	const clients, loseAfter, most = 4, 40, 100_000
	var (
		mu       sync.Mutex
		calls    []*inference.Call
		accepted atomic.Int64
		wg       sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			for range most {
				c, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
				if err != nil {
					if !errors.Is(err, inference.ErrNoWorker) && !errors.Is(err, inference.ErrQueueFull) {
						t.Errorf("Submit: %v", err)
					}
					if errors.Is(err, inference.ErrNoWorker) {
						return
					}
					continue
				}
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
				if accepted.Add(1) == loseAfter {
					f.lost.Store(true)
				}
			}
			t.Errorf("still accepted after %d Submits", most)
		})
	}
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()
	if !within(t, 10*time.Second, clientsDone, "clients refused with ErrNoWorker") {
		return false
	}

	// Later Submits are refused at once, with the cause.
	_, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
	assert.ErrorIs(t, err, inference.ErrNoWorker)
	assert.True(t, isLost(err), "ErrNoWorker wraps the cause: %v", err)
	ready, cause := s.Ready()
	assert.False(t, ready)
	assert.True(t, isLost(cause))

	shut := make(chan struct{})
	go func() {
		assert.NoError(t, s.Shutdown(context.Background()))
		close(shut)
	}()
	if !within(t, 10*time.Second, shut, "Shutdown(context.Background())") {
		return false
	}
	var completed, failed uint64
	for i, c := range calls {
		if !within(t, time.Second, c.Done(), fmt.Sprintf("call %d answered", i)) {
			return false
		}
		switch err := c.Err(); {
		case err == nil:
			completed++
		case errors.Is(err, inference.ErrNoWorker), errors.As(err, new(*inference.WorkerError)):
			assert.True(t, isLost(err), "call %d: %v", i, err)
			failed++
		default:
			t.Errorf("call %d: unexpected error %v", i, err)
		}
	}
	st := s.Stats()
	assert.Equal(t, uint64(len(calls)), st.Accepted)
	assert.Equal(t, completed, st.Completed)
	assert.Equal(t, failed, st.Failed)
	assert.Zero(t, st.Cancelled+st.Expired)
	return !t.Failed()
}

// TestInferReturnsOnlyWhenInputIsFree cancels Infer while its batch is being
// computed (issue 15, item 5): Infer must not return while the back-end still
// reads the input, so the caller may reuse its buffer at once (go test -race
// reports the caller's write against the back-end's reads otherwise). The
// back-end keeps reading until the test has cancelled, so the batch never
// completes before the cancellation, however the goroutines are scheduled.
func TestInferReturnsOnlyWhenInputIsFree(t *testing.T) {
	for _, p := range []inference.Pipeline{inference.Serial, inference.Overlap} {
		t.Run(p.String(), func(t *testing.T) {
			f := &faulty{computing: make(chan struct{}), readUntil: make(chan struct{})}
			s := faultyServer(t, f, inference.Config{Options: inference.Options{Pipeline: p}})
			in := inference.NewInput(1, 32, 32)
			ctx, cancel := context.WithCancel(context.Background())
			returned := make(chan error)
			go func() {
				_, err := s.Infer(ctx, in)
				returned <- err
			}()
			<-f.computing // the back-end is about to read in
			cancel()
			close(f.readUntil) // the batch may end now, after the cancellation
			err := <-returned
			assert.ErrorIs(t, err, context.Canceled)
			assert.True(t, f.computed.Load(), "Infer returned while the back-end was still reading the input")
			in.Data[0] = 1 // reuse the buffer
			require.NoError(t, s.Shutdown(context.Background()))
			assert.Equal(t, uint64(1), s.Stats().Cancelled)
		})
	}
}

// TestBindFailureTakesWorkerOutOfService: a worker whose Bind fails leaves
// service with the cause; the others keep serving; with none left the server
// says why and refuses requests (issue 19, item 5).
func TestBindFailureTakesWorkerOutOfService(t *testing.T) {
	errBind := errors.New("injected bind failure")
	for _, p := range []inference.Pipeline{inference.Serial, inference.Overlap} {
		t.Run(p.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Worker 0 binds for the first inference, then fails.
				f := &faulty{bindErr: func(worker, earlier int) error {
					if worker == 0 && earlier > 0 {
						return errBind
					}
					return nil
				}}
				s := faultyServer(t, f, inference.Config{Options: inference.Options{Workers: 2, Pipeline: p}})
				synctest.Wait()
				ready, err := s.Ready()
				assert.True(t, ready)
				assert.NoError(t, err)
				for i := range 10 {
					resp, err := s.Infer(context.Background(), inference.NewInput(1, 32, 32))
					require.NoError(t, err, "request %d", i)
					assert.Equal(t, 1, resp.Timing.Worker, "only worker 1 serves")
				}
				require.NoError(t, s.Shutdown(context.Background()))

				// Every worker fails to bind.
				f = &faulty{bindErr: func(_, earlier int) error {
					if earlier > 0 {
						return errBind
					}
					return nil
				}}
				s = faultyServer(t, f, inference.Config{Options: inference.Options{Workers: 2, Pipeline: p}})
				synctest.Wait()
				ready, err = s.Ready()
				assert.False(t, ready)
				assert.ErrorIs(t, err, errBind)
				var we *inference.WorkerError
				assert.ErrorAs(t, err, &we)
				_, err = s.Infer(context.Background(), inference.NewInput(1, 32, 32))
				assert.ErrorIs(t, err, inference.ErrNoWorker)
				assert.ErrorIs(t, err, errBind)
				require.NoError(t, s.Shutdown(context.Background()))
			})
		})
	}
	// A worker that cannot be bound for the first inference fails New.
	f := &faulty{bindErr: func(int, int) error { return errBind }}
	_, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 1}, Backend: f, Model: tinyModel(t)})
	assert.ErrorIs(t, err, errBind)
	assert.ErrorContains(t, err, "first inference on worker 0: bind")
}

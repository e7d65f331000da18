package inferbench_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/inference/resnet/testref"
)

// tinyModel is resnet.Tiny seeded with seed: it runs in milliseconds on the CPU.
func tinyModel(t testing.TB, seed uint64) *resnet.Model {
	m, err := resnet.New(resnet.Tiny(), seed)
	require.NoError(t, err)
	return m
}

func randomInput(rng *rand.Rand, n, h, w int) inference.Tensor {
	in := inference.NewInput(n, h, w)
	for i := range in.Data {
		in.Data[i] = float32(rng.NormFloat64())
	}
	return in
}

// maxRelErr is max|got-want| / max|want|.
func maxRelErr(got []float32, want []float64) float64 {
	var diff, scale float64
	for i := range want {
		diff = math.Max(diff, math.Abs(float64(got[i])-want[i]))
		scale = math.Max(scale, math.Abs(want[i]))
	}
	return diff / scale
}

func newServer(t testing.TB, cfg inference.Config) *inference.Server {
	t.Helper()
	s, err := inference.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestServerMatchesReferenceModel(t *testing.T) {
	m := tinyModel(t, 7)
	rng := rand.New(rand.NewPCG(1, 2))
	in := randomInput(rng, 3, 40, 36)
	want, err := m.Reference(in.Data, 3, 40, 36)
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		pipeline inference.Pipeline
		workers  int
	}{
		{"serial/1", inference.Serial, 1},
		{"serial/2", inference.Serial, 2},
		{"overlap/1", inference.Overlap, 1},
		{"overlap/3", inference.Overlap, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, inference.Config{Options: inference.Options{Height: 40, Width: 36, MaxBatch: 4, Pipeline: tc.pipeline, Workers: tc.workers}, Model: m})
			resp, err := s.Infer(context.Background(), in)
			require.NoError(t, err)
			assert.Equal(t, []int{3, 5}, resp.Logits.Shape)
			assert.LessOrEqual(t, maxRelErr(resp.Logits.Data, want), 1e-4, "relative error vs float64 reference")
		})
	}
	// Dynamic batching on the CPU back-end: three requests merged into one
	// batch and scattered back, each equal to its own reference.
	for _, p := range []inference.Pipeline{inference.Serial, inference.Overlap} {
		t.Run("batching/"+p.String(), func(t *testing.T) {
			s := newServer(t, inference.Config{Options: inference.Options{Height: 40, Width: 36, MaxBatch: 8, Pipeline: p}, Model: m,
				MaxQueueDelay: time.Hour, PreferredBatches: []int{4}})
			per := 3 * 40 * 36
			var calls []*inference.Call
			for i := 0; i < 3; i++ {
				part := inference.Tensor{Shape: []int{1 + i%2, 3, 40, 36}, Data: in.Data[:(1+i%2)*per]}
				c, err := s.Submit(context.Background(), inference.Request{Input: part})
				require.NoError(t, err)
				calls = append(calls, c)
			}
			for i, c := range calls {
				resp, err := c.Result()
				require.NoError(t, err)
				assert.Equal(t, 4, resp.Timing.Batch, "1+2+1 images merged (request %d)", i)
				n := 1 + i%2
				assert.LessOrEqual(t, maxRelErr(resp.Logits.Data, want[:n*5]), 1e-4, "request %d", i)
			}
		})
	}
}

func TestSerialAndOverlapAgree(t *testing.T) {
	m := tinyModel(t, 3)
	rng := rand.New(rand.NewPCG(3, 4))
	inputs := make([]inference.Tensor, 8)
	for i := range inputs {
		inputs[i] = randomInput(rng, 1+i%3, 32, 32)
	}
	results := map[inference.Pipeline][][]float32{}
	for _, p := range []inference.Pipeline{inference.Serial, inference.Overlap} {
		s := newServer(t, inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 4, Pipeline: p, Workers: 2}, Model: m})
		calls := make([]*inference.Call, len(inputs))
		for i, in := range inputs {
			c, err := s.Submit(context.Background(), inference.Request{Input: in})
			require.NoError(t, err)
			calls[i] = c
		}
		for _, c := range calls {
			resp, err := c.Result()
			require.NoError(t, err)
			results[p] = append(results[p], resp.Logits.Data)
		}
	}
	for i := range inputs {
		assert.Equal(t, results[inference.Serial][i], results[inference.Overlap][i], "request %d", i)
	}
}

// nopServer serves the zero-cost model: logits are the first classes values of
// each image, so each response can be matched with its request.
func nopServer(t testing.TB, cfg inference.Config) *inference.Server {
	cfg.Backend = nop.New()
	cfg.Model = tinyModel(t, 1)
	cfg.Height, cfg.Width = 32, 32
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 8
	}
	return newServer(t, cfg)
}

// stamp fills image i of in with value base+i.
func stamp(in inference.Tensor, base float32) {
	per := len(in.Data) / in.Shape[0]
	for i := 0; i < in.Shape[0]; i++ {
		for j := i * per; j < (i+1)*per; j++ {
			in.Data[j] = base + float32(i)
		}
	}
}

func TestEveryRequestAnsweredOnceWithItsOwnData(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  inference.Config
	}{
		{"serial/1", inference.Config{
			Options: inference.Options{Workers: 1}}},
		{"serial/4", inference.Config{
			Options: inference.Options{Workers: 4}}},
		{"overlap/2", inference.Config{
			Options: inference.Options{Workers: 2, Pipeline: inference.Overlap}}},
		{"batching/overlap", inference.Config{
			Options: inference.Options{Workers: 2, Pipeline: inference.Overlap}, MaxQueueDelay: 200 * time.Microsecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := nopServer(t, tc.cfg)
			const clients, each = 8, 200
			var answered atomic.Int64
			var wg sync.WaitGroup
			for c := 0; c < clients; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						n := 1 + (c+i)%3
						in := inference.NewInput(n, 32, 32)
						base := float32(c*10000 + i*10)
						stamp(in, base)
						resp, err := s.Infer(context.Background(), in)
						if !assert.NoError(t, err) {
							return
						}
						answered.Add(1)
						for k := 0; k < n; k++ {
							assert.Equal(t, base+float32(k), resp.Logits.Data[k*5], "client %d request %d image %d", c, i, k)
						}
					}
				}()
			}
			wg.Wait()
			st := s.Stats()
			assert.Equal(t, int64(clients*each), answered.Load())
			assert.Equal(t, uint64(clients*each), st.Accepted)
			assert.Equal(t, uint64(clients*each), st.Completed)
			assert.Equal(t, uint64(clients*each), st.Latency.Count)
			assert.Zero(t, st.Failed+st.Cancelled+st.Expired)
		})
	}
}

func TestBadInputNamesExpectedAndActual(t *testing.T) {
	s := nopServer(t, inference.Config{Options: inference.Options{MaxBatch: 4}, RejectNonFinite: true})
	nan := inference.NewInput(1, 32, 32)
	nan.Data[17] = float32(math.NaN())
	inf := inference.NewInput(1, 32, 32)
	inf.Data[3] = float32(math.Inf(-1))
	for _, tc := range []struct {
		name  string
		in    inference.Tensor
		field string
		want  string
		got   string
	}{
		{"nil", inference.Tensor{}, "input", "[n,3,32,32] float32 tensor", "nil"},
		{"rank 3", inference.Tensor{Shape: []int{3, 32, 32}, Data: make([]float32, 3*32*32)}, "rank", "4 ([n,3,H,W])", "3 ([3 32 32])"},
		{"1 channel", inference.Tensor{Shape: []int{1, 1, 32, 32}, Data: make([]float32, 32*32)}, "channels", "3", "1"},
		{"4 channels", inference.Tensor{Shape: []int{1, 4, 32, 32}, Data: make([]float32, 4*32*32)}, "channels", "3", "4"},
		{"too small", inference.Tensor{Shape: []int{1, 3, 16, 32}, Data: make([]float32, 3*16*32)}, "height x width", "at least 32x32 (this server: 32x32)", "16x32"},
		{"wrong width", inference.Tensor{Shape: []int{1, 3, 32, 40}, Data: make([]float32, 3*32*40)}, "width", "32", "40"},
		{"batch 0", inference.Tensor{Shape: []int{0, 3, 32, 32}, Data: []float32{}}, "batch", "1..4", "0"},
		{"batch over max", inference.NewInput(5, 32, 32), "batch", "1..4", "5"},
		{"short data", inference.Tensor{Shape: []int{2, 3, 32, 32}, Data: make([]float32, 3*32*32)}, "data", "6144 values for shape [2 3 32 32]", "3072 values"},
		{"NaN", nan, "value", "finite values", "NaN at index 17"},
		{"-Inf", inf, "value", "finite values", "-Inf at index 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Infer(context.Background(), tc.in)
			var ie *inference.InputError
			require.ErrorAs(t, err, &ie)
			assert.ErrorIs(t, err, inference.ErrBadInput)
			assert.Equal(t, tc.field, ie.Field)
			assert.Equal(t, tc.want, ie.Want)
			assert.Equal(t, tc.got, ie.Got)
			// A good request right after still succeeds.
			good := inference.NewInput(1, 32, 32)
			stamp(good, 42)
			resp, err := s.Infer(context.Background(), good)
			require.NoError(t, err)
			assert.Equal(t, float32(42), resp.Logits.Data[0])
		})
	}
}

// gated is a test back-end around nop: Compute waits on a gate, counts the
// images it computes, and fails as the test asks.
type gated struct {
	gate     chan struct{} // nil: no waiting
	armed    atomic.Bool   // the gate applies (set after the server's first inference)
	computed atomic.Int64
	panicOn  float32         // an image whose first value equals this panics
	failOn   float32         // ... returns an error
	loseOn   float32         // ... returns an error wrapping backend.ErrDeviceLost
	opts     backend.Options // what Open was given
}

func (g *gated) Name() string { return "gated" }

func (g *gated) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	g.opts = opts
	e, err := nop.New().Open(m, opts)
	if err != nil {
		return nil, err
	}
	ws := e.Workers()
	for i, w := range ws {
		ws[i] = &gatedWorker{Worker: w, g: g, first: make([]float32, opts.Slots)}
	}
	return e, nil
}

type gatedWorker struct {
	backend.Worker
	g     *gated
	first []float32 // per slot: the first value of the batch's first image
}

func (w *gatedWorker) CopyIn(s int, parts [][]float32) error {
	w.first[s] = parts[0][0]
	return w.Worker.CopyIn(s, parts)
}

func (w *gatedWorker) Compute(s, n int) error {
	if w.g.gate != nil && w.g.armed.Load() {
		<-w.g.gate
	}
	switch v := w.first[s]; {
	case v != 0 && v == w.g.panicOn:
		panic("injected panic")
	case v != 0 && v == w.g.failOn:
		return errors.New("injected error")
	case v != 0 && v == w.g.loseOn:
		return fmt.Errorf("injected: %w", backend.ErrDeviceLost)
	}
	if w.g.armed.Load() {
		w.g.computed.Add(int64(n))
	}
	return w.Worker.Compute(s, n)
}

func gatedServer(t testing.TB, g *gated, cfg inference.Config) *inference.Server {
	cfg.Backend = g
	cfg.Model = tinyModel(t, 1)
	cfg.Height, cfg.Width = 32, 32
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 4
	}
	s := newServer(t, cfg)
	g.armed.Store(true)
	return s
}

func TestConfigReachesBackend(t *testing.T) {
	g := &gated{}
	norm := inference.Normalization{Mean: []float32{0.1, 0.2, 0.3}, Std: []float32{0.4, 0.5, 0.6}}
	gatedServer(t, g, inference.Config{Options: inference.Options{Workers: 3, Pipeline: inference.Overlap, MaxBatch: 8, Batches: []int{2, 8}, Precision: inference.FP16, Graphs: true, Devices: []int{0}, PinnedInput: true, Normalization: norm}})
	assert.Equal(t, backend.Options{Workers: 3, Slots: 3, MaxBatch: 8, Height: 32, Width: 32, Pipeline: backend.Overlap,
		Precision: backend.FP16, Graphs: true, Devices: []int{0}, Batches: []int{2, 8}, PinnedInput: true, Normalization: norm}, g.opts)
}

func TestShutdownDrainsAcceptedRequests(t *testing.T) {
	g := &gated{gate: make(chan struct{})}
	s := gatedServer(t, g, inference.Config{Options: inference.Options{Workers: 2, Pipeline: inference.Overlap}})
	var calls []*inference.Call
	for i := 0; i < 20; i++ {
		c, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
		require.NoError(t, err)
		calls = append(calls, c)
	}
	done := make(chan error)
	go func() { done <- s.Shutdown(context.Background()) }()
	// Admission stops at once (a Submit racing with Shutdown's start may still
	// be accepted, and is then drained too).
	for {
		c, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
		if errors.Is(err, inference.ErrServerClosed) {
			break
		}
		require.NoError(t, err)
		calls = append(calls, c)
		time.Sleep(time.Millisecond)
	}
	close(g.gate)
	require.NoError(t, <-done)
	for i, c := range calls {
		_, err := c.Result()
		assert.NoError(t, err, "call %d", i)
	}
	assert.Equal(t, int64(len(calls)), g.computed.Load())
	assert.NoError(t, s.Shutdown(context.Background()), "second Shutdown")
	assert.NoError(t, s.Close(), "Close after Shutdown")
}

func TestCloseFailsPendingRequests(t *testing.T) {
	g := &gated{gate: make(chan struct{})}
	s := gatedServer(t, g, inference.Config{Options: inference.Options{Workers: 1}})
	var calls []*inference.Call
	for i := 0; i < 10; i++ {
		c, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
		require.NoError(t, err)
		calls = append(calls, c)
	}
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	for i, c := range calls {
		assert.ErrorIs(t, c.Err(), inference.ErrServerClosed, "call %d", i)
	}
	close(g.gate) // let the worker leave the batch it was running
	require.NoError(t, <-closed)
	require.NoError(t, s.Close(), "second Close")
	_, err := s.Infer(context.Background(), inference.NewInput(1, 32, 32))
	assert.ErrorIs(t, err, inference.ErrServerClosed)
}

func TestCancelledWhileQueuedIsNeverComputed(t *testing.T) {
	g := &gated{gate: make(chan struct{})}
	s := gatedServer(t, g, inference.Config{Options: inference.Options{Workers: 1}})
	// The first request occupies the worker at the gate.
	first, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var queued []*inference.Call
	for i := 0; i < 5; i++ {
		c, err := s.Submit(ctx, inference.Request{Input: inference.NewInput(2, 32, 32)})
		require.NoError(t, err)
		queued = append(queued, c)
	}
	cancel()
	close(g.gate)
	require.NoError(t, first.Err())
	for _, c := range queued {
		assert.ErrorIs(t, c.Err(), context.Canceled)
	}
	assert.Equal(t, int64(1), g.computed.Load(), "images computed")
	assert.Equal(t, uint64(5), s.Stats().Cancelled)
}

func TestRequestTimeout(t *testing.T) {
	g := &gated{gate: make(chan struct{})}
	s := gatedServer(t, g, inference.Config{Options: inference.Options{Workers: 1}})
	first, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
	require.NoError(t, err)
	late, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32), Timeout: time.Millisecond})
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	close(g.gate)
	require.NoError(t, first.Err())
	assert.ErrorIs(t, late.Err(), context.DeadlineExceeded)
	assert.Equal(t, uint64(1), s.Stats().Expired)
}

func TestQueueFullRejects(t *testing.T) {
	g := &gated{gate: make(chan struct{})}
	s := gatedServer(t, g, inference.Config{Options: inference.Options{Workers: 1}, MaxQueue: 2, QueuePolicy: inference.Reject})
	first, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Stats().Queued == 0 }, 5*time.Second, time.Millisecond, "the worker takes the first request")
	accepted := []*inference.Call{first}
	var full int
	for i := 1; i < 10; i++ {
		c, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
		if errors.Is(err, inference.ErrQueueFull) {
			full++
			continue
		}
		require.NoError(t, err)
		accepted = append(accepted, c)
	}
	close(g.gate)
	// One request at the worker, two in the queue; the rest rejected.
	assert.Len(t, accepted, 3)
	assert.Equal(t, 7, full)
	for _, c := range accepted {
		assert.NoError(t, c.Err())
	}
}

func TestQueueFullBlocksUntilContextEnds(t *testing.T) {
	g := &gated{gate: make(chan struct{})}
	s := gatedServer(t, g, inference.Config{Options: inference.Options{Workers: 1}, MaxQueue: 1})
	var accepted []*inference.Call
	for i := 0; i < 2; i++ {
		c, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
		require.NoError(t, err)
		accepted = append(accepted, c)
	}
	// The worker holds one, the queue one: the next Submit blocks.
	require.Eventually(t, func() bool { return s.Stats().Queued == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := s.Submit(ctx, inference.Request{Input: inference.NewInput(1, 32, 32)})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	close(g.gate)
	for _, c := range accepted {
		assert.NoError(t, c.Err())
	}
}

func TestWorkerFaults(t *testing.T) {
	for _, p := range []inference.Pipeline{inference.Serial, inference.Overlap} {
		t.Run(p.String(), func(t *testing.T) {
			g := &gated{panicOn: 7, failOn: 8, loseOn: 9}
			s := gatedServer(t, g, inference.Config{Options: inference.Options{Workers: 2, Pipeline: p}})
			infer := func(v float32) error {
				in := inference.NewInput(1, 32, 32)
				stamp(in, v)
				_, err := s.Infer(context.Background(), in)
				return err
			}
			err := infer(7)
			var we *inference.WorkerError
			require.ErrorAs(t, err, &we)
			assert.Contains(t, err.Error(), "compute panicked: injected panic")
			assert.ErrorContains(t, infer(8), "compute: injected error")
			require.NoError(t, infer(1), "the worker recovers")
			// Lose one device: the other worker keeps serving.
			assert.ErrorIs(t, infer(9), backend.ErrDeviceLost)
			ready, cause := s.Ready()
			assert.True(t, ready)
			assert.NoError(t, cause)
			for i := 0; i < 20; i++ {
				require.NoError(t, infer(1))
			}
			// Lose the second: the server is no longer ready and says why.
			assert.ErrorIs(t, infer(9), backend.ErrDeviceLost)
			ready, cause = s.Ready()
			assert.False(t, ready)
			assert.ErrorIs(t, cause, backend.ErrDeviceLost)
			assert.ErrorIs(t, infer(1), inference.ErrNoWorker)
		})
	}
}

func TestNoGoroutineOutlivesServer(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, cfg := range []inference.Config{
		{Options: inference.Options{Workers: 3, Pipeline: inference.Overlap}},
		{Options: inference.Options{Workers: 2}, MaxQueueDelay: time.Millisecond},
	} {
		s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 4, Workers: cfg.Workers, Pipeline: cfg.Pipeline}, Backend: nop.New(), Model: tinyModel(t, 1),
			MaxQueueDelay: cfg.MaxQueueDelay})
		require.NoError(t, err)
		_, err = s.Infer(context.Background(), inference.NewInput(1, 32, 32))
		require.NoError(t, err)
		require.NoError(t, s.Shutdown(context.Background()))
	}
	assertNoLeak(t, before)
}

// assertNoLeak fails unless the goroutine count returns to before within 5 s.
// (assert.Eventually would count its own goroutine.)
func assertNoLeak(t *testing.T, before int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if runtime.NumGoroutine() <= before {
			return
		}
	}
	buf := make([]byte, 1<<16)
	t.Errorf("goroutines: before %d, after %d:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
}

func TestDynamicBatchingMergesWithinDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := nopServer(t, inference.Config{Options: inference.Options{MaxBatch: 8, Workers: 1}, MaxQueueDelay: 10 * time.Millisecond})
		start := time.Now()
		var calls []*inference.Call
		for i := 0; i < 3; i++ {
			in := inference.NewInput(1+i, 32, 32)
			stamp(in, float32(100*(i+1)))
			c, err := s.Submit(context.Background(), inference.Request{Input: in})
			require.NoError(t, err)
			calls = append(calls, c)
		}
		for i, c := range calls {
			resp, err := c.Result()
			require.NoError(t, err)
			assert.Equal(t, 6, resp.Timing.Batch, "request %d ran in one batch of 1+2+3 images", i)
			for k := 0; k <= i; k++ {
				assert.Equal(t, float32(100*(i+1)+k), resp.Logits.Data[k*5])
			}
		}
		assert.Equal(t, 10*time.Millisecond, time.Since(start), "waited exactly MaxQueueDelay for company")
		assert.Equal(t, 6.0, s.Stats().MeanBatch())

		// A full batch goes at once; a request that would not fit waits for the next.
		start = time.Now()
		a, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(5, 32, 32)})
		require.NoError(t, err)
		b, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(3, 32, 32)})
		require.NoError(t, err)
		c, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(4, 32, 32)})
		require.NoError(t, err)
		ra, err := a.Result()
		require.NoError(t, err)
		assert.Equal(t, 8, ra.Timing.Batch)
		rc, err := c.Result()
		require.NoError(t, err)
		assert.Equal(t, 4, rc.Timing.Batch)
		require.NoError(t, b.Err())
		assert.Equal(t, 10*time.Millisecond, time.Since(start), "the second batch waited its delay")
		require.NoError(t, s.Shutdown(context.Background()))
	})
}

// scripted is a test back-end around nop whose every step takes a known time
// on the clock (simulated time inside a synctest bubble): Open takes open,
// copy-in h2d, the k-th compute call compute(k) (k from 0: the first inference
// New runs is k = 0), copy-out d2h. Its sampler notes how many computes had
// run when it was first started.
type scripted struct {
	open, h2d, d2h time.Duration
	// prime, if set, is the part of open that the engine reports as its first
	// inferences (backend.PartFirst).
	prime       time.Duration
	compute     func(k int) time.Duration
	computes    atomic.Int64
	sampled     atomic.Bool
	sampledFrom atomic.Int64 // computes done when the sampler first started
}

func (s *scripted) Name() string { return "scripted" }

func (s *scripted) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	time.Sleep(s.open)
	e, err := nop.New().Open(m, opts)
	if err != nil {
		return nil, err
	}
	se := &scriptedEngine{Engine: e, s: s}
	for _, w := range e.Workers() {
		se.workers = append(se.workers, &scriptedWorker{Worker: w, s: s})
	}
	return se, nil
}

type scriptedEngine struct {
	backend.Engine
	s       *scripted
	workers []backend.Worker
}

func (e *scriptedEngine) Workers() []backend.Worker { return e.workers }
func (e *scriptedEngine) Info() backend.Info {
	if e.s.prime == 0 {
		return e.Engine.Info()
	}
	return backend.Info{Setup: []backend.Part{{Name: "plan", Time: e.s.open - e.s.prime}, {Name: backend.PartFirst, Time: e.s.prime}}}
}
func (e *scriptedEngine) Sampler() backend.Sampler { return scriptedSampler{e.s} }

type scriptedSampler struct{ s *scripted }

func (p scriptedSampler) Start() error {
	if p.s.sampled.CompareAndSwap(false, true) {
		p.s.sampledFrom.Store(p.s.computes.Load())
	}
	return nil
}

func (p scriptedSampler) Stop() (backend.Utilization, error) { return backend.Utilization{}, nil }

type scriptedWorker struct {
	backend.Worker
	s *scripted
}

func (w *scriptedWorker) CopyIn(slot int, parts [][]float32) error {
	time.Sleep(w.s.h2d)
	return w.Worker.CopyIn(slot, parts)
}

func (w *scriptedWorker) Compute(slot, n int) error {
	k := int(w.s.computes.Add(1) - 1)
	if w.s.compute != nil {
		time.Sleep(w.s.compute(k))
	}
	return w.Worker.Compute(slot, n)
}

func (w *scriptedWorker) CopyOut(slot, n int) error {
	time.Sleep(w.s.d2h)
	return w.Worker.CopyOut(slot, n)
}

// scriptedServer serves the tiny model at 32x32 on sc.
func scriptedServer(t testing.TB, sc *scripted, cfg inference.Config) *inference.Server {
	cfg.Backend = sc
	cfg.Model = tinyModel(t, 1)
	cfg.Height, cfg.Width = 32, 32
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 4
	}
	s, err := inference.New(cfg)
	require.NoError(t, err)
	return s
}

// firstThen is a scripted compute time: first for the server's first
// inference, rest for every later one.
func firstThen(first, rest time.Duration) func(k int) time.Duration {
	return func(k int) time.Duration {
		if k == 0 {
			return first
		}
		return rest
	}
}

func TestWarmupIsReportedInParts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Open takes 30 ms and the first inference 7 ms; the model is given,
		// so there is nothing to load and no time passes for it.
		sc := &scripted{open: 30 * time.Millisecond, compute: firstThen(7*time.Millisecond, time.Millisecond)}
		s := scriptedServer(t, sc, inference.Config{Options: inference.Options{Workers: 1}})
		defer s.Close()
		w := s.Warmup()
		assert.Zero(t, w.Load)
		assert.Equal(t, 30*time.Millisecond, w.Setup)
		assert.Equal(t, 7*time.Millisecond, w.First)
		assert.Equal(t, 37*time.Millisecond, w.Total())
	})
}

func TestFirstInferencesInsideOpenCountAsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Open takes 30 ms, 12 of them the engine's first inferences (as the
		// cuda back-end primes its prepared sizes); the server's own first
		// inference takes 7 ms. first-ns is the device's first inferences,
		// not the second ones.
		sc := &scripted{open: 30 * time.Millisecond, prime: 12 * time.Millisecond, compute: firstThen(7*time.Millisecond, time.Millisecond)}
		s := scriptedServer(t, sc, inference.Config{Options: inference.Options{Workers: 1}})
		defer s.Close()
		w := s.Warmup()
		assert.Equal(t, 18*time.Millisecond, w.Setup, "Open less its first inferences")
		assert.Equal(t, 19*time.Millisecond, w.First, "the engine's first inferences and the server's")
		assert.Equal(t, 37*time.Millisecond, w.Total(), "all of New")
	})
}

// starting is a scripted back-end that can Start (backend.Starter) and
// records the order of Start, Open and stop.
type starting struct {
	*scripted
	mu     sync.Mutex
	events []string
	opts   backend.Options // Start's
}

func (s *starting) record(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

func (s *starting) Start(opts backend.Options) (stop func()) {
	s.record("start")
	s.opts = opts
	return func() { s.record("stop") }
}

func (s *starting) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	s.record("open")
	if !reflect.DeepEqual(opts, s.opts) {
		return nil, fmt.Errorf("Open's options %+v are not Start's %+v", opts, s.opts)
	}
	return s.scripted.Open(m, opts)
}

// TestStarterStartsBeforeTheModelLoads checks that the server starts a
// backend.Starter before it loads the model, opens it with the same options
// and stops it once, also when the model does not load.
func TestStarterStartsBeforeTheModelLoads(t *testing.T) {
	be := &starting{scripted: &scripted{}}
	s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 4, Batches: []int{1, 4}}, Backend: be, Arch: resnet.Tiny()})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.Equal(t, []string{"start", "open", "stop"}, be.events)

	be = &starting{scripted: &scripted{}}
	_, err = inference.New(inference.Config{Backend: be, Checkpoint: "testdata/does-not-exist.pt"})
	require.Error(t, err)
	assert.Equal(t, []string{"start", "stop"}, be.events, "no Open, and what Start made is released")
}

// TestServerMatchesPyTorch serves every PyTorch reference model in
// testdata/reference (made by scripts/make_reference.py) through the CPU
// back-end, loading the checkpoint file through Config.Checkpoint, and compares
// the logits with PyTorch's float64 ones.
func TestServerMatchesPyTorch(t *testing.T) {
	cases, err := testref.Load("testdata/reference")
	require.NoError(t, err)
	raw, err := os.ReadFile("testdata/reference/manifest.json")
	require.NoError(t, err)
	var man struct {
		Cases []struct{ Name, Checkpoint string }
	}
	require.NoError(t, json.Unmarshal(raw, &man))
	require.Len(t, man.Cases, len(cases))
	for i, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			require.Equal(t, c.Name, man.Cases[i].Name)
			s := newServer(t, inference.Config{Options: inference.Options{Height: c.H, Width: c.W, MaxBatch: c.N, Workers: 2, Pipeline: inference.Overlap}, Checkpoint: filepath.Join("testdata/reference", man.Cases[i].Checkpoint)})
			assert.Positive(t, s.Warmup().Load, "checkpoint load is timed")
			resp, err := s.Infer(context.Background(), inference.Tensor{Shape: []int{c.N, 3, c.H, c.W}, Data: c.Input})
			require.NoError(t, err)
			e := maxRelErr(resp.Logits.Data, c.Logits)
			t.Logf("%s: max abs error / max |logit| = %.2e", c.Name, e)
			assert.LessOrEqual(t, e, 1e-4)
		})
	}
}

func TestBadCheckpointIsAnError(t *testing.T) {
	_, err := inference.New(inference.Config{Checkpoint: "testdata/does-not-exist.pt"})
	assert.ErrorContains(t, err, "does-not-exist.pt")
}

func TestCloseLeavesCallerBufferAlone(t *testing.T) {
	g := &gated{gate: make(chan struct{})}
	s := gatedServer(t, g, inference.Config{Options: inference.Options{Workers: 1}})
	out := make([]float32, 5)
	for i := range out {
		out[i] = -1
	}
	in := inference.NewInput(1, 32, 32)
	stamp(in, 3)
	c, err := s.Submit(context.Background(), inference.Request{Input: in, Logits: out})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.Stats().Queued == 0 }, 5*time.Second, time.Millisecond, "the worker holds the batch")
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	require.ErrorIs(t, c.Err(), inference.ErrServerClosed)
	close(g.gate) // the batch finishes after its call was answered
	require.NoError(t, <-closed)
	assert.Equal(t, []float32{-1, -1, -1, -1, -1}, out, "nothing written after the call was answered")
}

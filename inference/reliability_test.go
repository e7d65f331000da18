package inference_test

import (
	"context"
	"errors"
	"flag"
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
		s, err := inference.New(inference.Config{Backend: slow{service}, Model: tinyModel(t), Height: 32, Width: 32,
			MaxBatch: 1, MaxQueue: maxQueue, QueuePolicy: inference.Reject})
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
		s, err := inference.New(inference.Config{Backend: slow{10 * time.Millisecond}, Model: tinyModel(t), Height: 32, Width: 32,
			MaxBatch: 2, Pipeline: inference.Overlap})
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
	s, err := inference.New(inference.Config{Backend: nop.New(), Model: tinyModel(f), Height: 32, Width: 32, MaxBatch: 8, RejectNonFinite: true})
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
	s, err := inference.New(inference.Config{Model: tinyModel(t), Height: 32, Width: 32, MaxBatch: 1, Workers: 2, Pipeline: inference.Overlap})
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

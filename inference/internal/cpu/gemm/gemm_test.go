package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferbench/inferbench/inference/internal/switches"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func randSlice(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// naive is the reference: a float64 triple loop with the epilogue.
func naive(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, ep Epilogue) {
	ldr := ep.LdResidual
	if ldr == 0 {
		ldr = ldc
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += float64(a[i*lda+p]) * float64(b[p*ldb+j])
			}
			if ep.Bias != nil {
				s += float64(ep.Bias[i])
			}
			if ep.Residual != nil {
				s += float64(ep.Residual[i*ldr+j])
			}
			if ep.ReLU && s < 0 {
				s = 0
			}
			c[i*ldc+j] = float32(s)
		}
	}
}

// tolerance is the allowed error of a float32 sum of k products of N(0,1)
// values, whose magnitude grows like sqrt(k).
func tolerance(k int) float64 { return 1e-5 * (1 + float64(k)) }

func contexts(t testing.TB) []*Context {
	t.Helper()
	var cs []*Context
	for _, kern := range Kernels() {
		for _, threads := range []int{1, 2, 3} {
			c, err := New(Config{Threads: threads, Kernel: kern})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			cs = append(cs, c)
		}
	}
	return cs
}

func TestGemm(t *testing.T) {
	shapes := []struct {
		name                   string
		m, n, k, lda, ldb, ldc int
	}{
		{"1x1x1", 1, 1, 1, 1, 1, 1},
		{"tile", 6, 16, 8, 8, 16, 16},
		{"odd", 7, 17, 5, 5, 17, 17},
		{"strides", 13, 29, 31, 40, 33, 35},
		{"tall", 301, 3, 77, 77, 3, 3},
		{"wide", 5, 1500, 40, 40, 1500, 1501},
		{"deep", 20, 20, 1000, 1000, 20, 20},
		{"blocks", 150, 1100, 300, 300, 1100, 1100},
		{"conv-like", 64, 1000, 576, 576, 1000, 1000},
		{"k-zero", 4, 5, 0, 1, 5, 5},
	}
	eps := []struct {
		name            string
		bias, res, relu bool
	}{
		{"plain", false, false, false},
		{"bias", true, false, false},
		{"bias-res-relu", true, true, true},
		{"relu", false, false, true},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ctx := range contexts(t) {
		for _, sh := range shapes {
			for _, e := range eps {
				if sh.m*sh.n*sh.k > 1<<20 && (e.name != "bias-res-relu" || ctx.Threads() != 3) {
					continue // the smaller shapes cover the epilogues and thread counts
				}
				name := fmt.Sprintf("kernel=%s/threads=%d/%s/%s", ctx.Kernel(), ctx.Threads(), sh.name, e.name)
				t.Run(name, func(t *testing.T) {
					a := randSlice(rng, max(1, sh.m*sh.lda))
					b := randSlice(rng, max(1, sh.k*sh.ldb))
					var ep Epilogue
					if e.bias {
						ep.Bias = randSlice(rng, sh.m)
					}
					if e.res {
						ep.Residual = randSlice(rng, sh.m*(sh.n+3))
						ep.LdResidual = sh.n + 3
					}
					ep.ReLU = e.relu
					got := randSlice(rng, sh.m*sh.ldc)
					want := append([]float32(nil), got...)
					init := append([]float32(nil), got...)
					require.NoError(t, ctx.Gemm(sh.m, sh.n, sh.k, a, sh.lda, b, sh.ldb, got, sh.ldc, ep))
					naive(sh.m, sh.n, sh.k, a, sh.lda, b, sh.ldb, want, sh.ldc, ep)
					assertClose(t, got, want, tolerance(sh.k))
					if sh.k == 0 {
						return
					}
					pa, err := NewPackedA(sh.m, sh.k, a, sh.lda, ctx.Kernel())
					require.NoError(t, err)
					assert.Equal(t, sh.m, pa.Rows())
					assert.Equal(t, sh.k, pa.Cols())
					copy(got, init)
					require.NoError(t, ctx.GemmPacked(pa, sh.n, b, sh.ldb, got, sh.ldc, ep))
					assertClose(t, got, want, tolerance(sh.k))
				})
			}
		}
	}
}

func assertClose(t *testing.T, got, want []float32, tol float64) {
	t.Helper()
	require.Len(t, got, len(want))
	bad := 0
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol) {
			if bad < 5 {
				t.Errorf("C[%d] = %v, want %v (tolerance %g)", i, got[i], want[i], tol)
			}
			bad++
		}
	}
	assert.Zero(t, bad, "values outside tolerance")
}

func TestErrors(t *testing.T) {
	ctx, err := New(Config{Threads: 2})
	require.NoError(t, err)
	defer ctx.Close()
	buf := make([]float32, 100)
	cases := []struct {
		name string
		call func() error
	}{
		{"short A", func() error { return ctx.Gemm(5, 5, 5, buf[:24], 5, buf, 5, buf, 5, Epilogue{}) }},
		{"short B", func() error { return ctx.Gemm(5, 5, 5, buf, 5, buf[:20], 5, buf, 5, Epilogue{}) }},
		{"short C", func() error { return ctx.Gemm(5, 5, 5, buf, 5, buf, 5, buf[:10], 5, Epilogue{}) }},
		{"small lda", func() error { return ctx.Gemm(5, 5, 5, buf, 4, buf, 5, buf, 5, Epilogue{}) }},
		{"short bias", func() error { return ctx.Gemm(5, 5, 5, buf, 5, buf, 5, buf, 5, Epilogue{Bias: buf[:4]}) }},
		{"short residual", func() error {
			return ctx.Gemm(5, 5, 5, buf, 5, buf, 5, make([]float32, 25), 5, Epilogue{Residual: buf[:24]})
		}},
		{"packed B short", func() error {
			pa, err := NewPackedA(2, 4, buf, 4)
			require.NoError(t, err)
			return ctx.GemmPacked(pa, 30, buf, 30, buf, 30, Epilogue{})
		}},
		{"packed unknown kernel", func() error { _, err := NewPackedA(2, 4, buf, 4, "nope"); return err }},
		{"packed empty", func() error { _, err := NewPackedA(0, 4, buf, 4); return err }},
	}
	if ctx.Kernel() != generic.name && ctx.kern.mr != generic.mr {
		cases = append(cases, struct {
			name string
			call func() error
		}{"packed for another kernel", func() error {
			pa, err := NewPackedA(2, 4, buf, 4, "generic")
			require.NoError(t, err)
			return ctx.GemmPacked(pa, 3, buf, 3, buf, 3, Epilogue{})
		}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "gemm: ")
		})
	}
	_, err = New(Config{Kernel: "nope"})
	assert.ErrorContains(t, err, `gemm: kernel "nope"`)
	_, err = New(Config{Threads: -1})
	assert.ErrorContains(t, err, "gemm: Threads")
	require.NoError(t, ctx.Close())
	require.NoError(t, ctx.Close(), "second Close")
	assert.ErrorIs(t, ctx.Gemm(1, 1, 1, buf, 1, buf, 1, buf, 1, Epilogue{}), ErrClosed)
}

func TestKernelEnv(t *testing.T) {
	t.Setenv(switches.GemmKernel.Name, "generic")
	ctx, err := New(Config{Threads: 1})
	require.NoError(t, err)
	defer ctx.Close()
	assert.Equal(t, "generic", ctx.Kernel())
}

func TestAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	ctx, err := New(Config{Threads: 2})
	require.NoError(t, err)
	defer ctx.Close()
	m, n, k := 64, 300, 200
	a, b := randSlice(rng, m*k), randSlice(rng, k*n)
	c, bias := make([]float32, m*n), randSlice(rng, m)
	pa, err := NewPackedA(m, k, a, k, ctx.Kernel())
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(20, func() {
		if err := ctx.Gemm(m, n, k, a, k, b, n, c, n, Epilogue{Bias: bias, ReLU: true}); err != nil {
			t.Fatal(err)
		}
		if err := ctx.GemmPacked(pa, n, b, n, c, n, Epilogue{Bias: bias}); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "allocations per Gemm and GemmPacked")
}

func BenchmarkGemm(b *testing.B) {
	shapes := []struct{ m, n, k int }{
		{64, 3969, 576},   // ResNet-18 stage 1 at 250x250, batch 1
		{128, 1024, 1152}, // stage 2
		{256, 256, 2304},  // stage 3
		{512, 64, 4608},   // stage 4
		{512, 512, 512},
		{1024, 1024, 1024},
	}
	for _, kern := range Kernels() {
		for _, threads := range []int{1, runtime.GOMAXPROCS(0)} {
			for _, sh := range shapes {
				name := fmt.Sprintf("kernel=%s/threads=%d/m=%d/n=%d/k=%d", kern, threads, sh.m, sh.n, sh.k)
				b.Run(name, func(b *testing.B) {
					if kern == "generic" && sh.m*sh.n*sh.k > 1<<27 {
						b.Skip("generic kernel: large shapes take too long")
					}
					ctx, err := New(Config{Threads: threads, Kernel: kern})
					require.NoError(b, err)
					defer ctx.Close()
					rng := rand.New(rand.NewPCG(1, 1))
					a, bb := randSlice(rng, sh.m*sh.k), randSlice(rng, sh.k*sh.n)
					c := make([]float32, sh.m*sh.n)
					b.ReportAllocs()
					for b.Loop() {
						if err := ctx.Gemm(sh.m, sh.n, sh.k, a, sh.k, bb, sh.n, c, sh.n, Epilogue{}); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(2*float64(sh.m*sh.n*sh.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

func TestParallel(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		for _, n := range []int{0, 1, 5, 64, 1001} {
			t.Run(fmt.Sprintf("threads=%d/n=%d", threads, n), func(t *testing.T) {
				ctx, err := New(Config{Threads: threads})
				require.NoError(t, err)
				defer ctx.Close()
				hits := make([]int, n)
				// busy[thread] counts the calls of a thread in progress:
				// never more than one.
				busy := make([]atomic.Int32, threads)
				var overlap atomic.Bool
				require.NoError(t, ctx.Parallel(n, 4, func(thread, lo, hi int) {
					if busy[thread].Add(1) != 1 {
						overlap.Store(true)
					}
					for i := lo; i < hi; i++ {
						hits[i]++
					}
					busy[thread].Add(-1)
				}))
				for i, h := range hits {
					assert.Equal(t, 1, h, "hits[%d]", i)
				}
				assert.False(t, overlap.Load(), "two calls of one thread at once")
			})
		}
	}
	ctx, err := New(Config{Threads: 2})
	require.NoError(t, err)
	defer ctx.Close()
	err = ctx.Parallel(10, 1, func(thread, lo, hi int) { panic("boom") })
	assert.ErrorContains(t, err, "gemm: worker panicked: boom")
	// The context still works after a panic.
	c := make([]float32, 1)
	require.NoError(t, ctx.Gemm(1, 1, 1, []float32{2}, 1, []float32{3}, 1, c, 1, Epilogue{}))
	assert.Equal(t, float32(6), c[0])
}

// BenchmarkParallel measures what handing a job to the threads and waiting
// for them costs: one empty task per thread.
func BenchmarkParallel(b *testing.B) {
	ctx, err := New(Config{})
	require.NoError(b, err)
	defer ctx.Close()
	n := ctx.Threads()
	fn := func(thread, lo, hi int) {}
	for b.Loop() {
		if err := ctx.Parallel(n, 1, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKernelAllThreads measures how fast one thread computes when
// every thread of the Context computes at once, from the cache closest to
// the core: each thread runs the micro-kernel over the same packed panels
// of A and B (k = 64: 16 KiB at most with AVX-512, which L1 holds), writing
// its own tile, for kernelSlice from the start of each job, counting its
// calls, so that a thread that starts late or runs slow costs the others
// nothing. It reports GFLOP/s-per-thread (two flops a multiply-add, all
// threads' calls over the jobs' wall time on Go's monotonic clock, divided
// by the threads) and GFLOP/s-slowest-thread (the thread that made the
// fewest calls). Run at 2 and at 16 threads (GOMAXPROCS, pinned with
// taskset), the quotient of the per-thread figures is what the cores give
// a thread when all compute against when two do: the cores' clock and how
// the virtual CPUs share physical cores set it, not the code.
func BenchmarkKernelAllThreads(b *testing.B) {
	ctx, err := New(Config{})
	require.NoError(b, err)
	defer ctx.Close()
	const k, batch, kernelSlice = 64, 64, 20 * time.Millisecond
	kern := ctx.kern
	rng := rand.New(rand.NewPCG(1, 2))
	a, bb := randSlice(rng, k*kern.mr), randSlice(rng, k*kern.nr)
	n := ctx.Threads()
	type thread struct {
		tile  []float32
		calls int64
		_     [64]byte // a cache line from the next thread's count
	}
	threads := make([]thread, n)
	for i := range threads {
		threads[i].tile = make([]float32, kern.mr*kern.nr)
	}
	var start time.Time
	fn := func(id, lo, hi int) {
		th := &threads[id]
		for time.Since(start) < kernelSlice {
			for r := 0; r < batch; r++ {
				kern.full(k, a, bb, th.tile, kern.nr, 0, nil, nil, 0)
			}
			th.calls += batch
		}
	}
	for b.Loop() {
		start = time.Now()
		if err := ctx.Parallel(n, 1, fn); err != nil {
			b.Fatal(err)
		}
	}
	flops := 2 * float64(k*kern.mr*kern.nr)
	sec := b.Elapsed().Seconds()
	all, slowest := int64(0), threads[0].calls
	for _, th := range threads {
		all += th.calls
		slowest = min(slowest, th.calls)
	}
	b.ReportMetric(flops*float64(all)/sec/1e9/float64(n), "GFLOP/s-per-thread")
	b.ReportMetric(flops*float64(slowest)/sec/1e9, "GFLOP/s-slowest-thread")
}

// TestYieldEvery checks that waiters give their P to other goroutines at
// every look at the clock when a Context has more threads than Ps, or there
// are more Ps than CPUs, and less often otherwise; and that a Context still
// computes in every case.
func TestYieldEvery(t *testing.T) {
	old := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(old)
	cpus := runtime.NumCPU()
	for _, tc := range []struct {
		name           string
		procs, threads int
		want           int
	}{
		{"a P a CPU, a thread a P", cpus, cpus, goschedEvery},
		{"fewer threads than Ps", cpus, 1, goschedEvery},
		{"more threads than Ps", cpus, cpus + 1, 1},
		{"more Ps than CPUs", cpus + 1, cpus + 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GOMAXPROCS(tc.procs)
			assert.Equal(t, tc.want, yieldEvery(tc.threads), "yieldEvery(%d) with GOMAXPROCS %d on %d CPUs", tc.threads, tc.procs, cpus)
			c, err := New(Config{Threads: tc.threads})
			require.NoError(t, err)
			defer c.Close()
			assert.Equal(t, tc.want, c.caller.every)
			var sum atomic.Int64
			require.NoError(t, c.Parallel(1000, 1, func(_, lo, hi int) {
				for i := lo; i < hi; i++ {
					sum.Add(int64(i))
				}
			}))
			assert.Equal(t, int64(999*1000/2), sum.Load())
		})
	}
}

// TestSleeperWakeForAnEarlierWait: a wake-up that finds the condition still
// false (one meant for an earlier wait, like the one a job's last worker
// sends after the caller has moved on to the next job) does not end the
// wait; the next one, after the condition is true, does.
func TestSleeperWakeForAnEarlierWait(t *testing.T) {
	s := newSleeper(2)
	var ready atomic.Bool
	done := make(chan struct{})
	go func() {
		s.wait(ready.Load)
		close(done)
	}()
	parked := func() {
		for deadline := time.Now().Add(5 * time.Second); s.state.Load() != asleep; {
			require.True(t, time.Now().Before(deadline), "the sleeper never parked")
			time.Sleep(100 * time.Microsecond)
		}
	}
	parked()
	s.wake() // the condition is still false
	parked() // it spins again, then parks again
	select {
	case <-done:
		t.Fatal("wait returned on a wake-up while its condition was false")
	default:
	}
	ready.Store(true)
	s.wake()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after its condition became true and it was woken")
	}
}

package conv

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/internal/cpu/gemm"
)

// chain is a small network of every kind of step, laid out as the CPU
// back-end lays out ResNet: the input's conversion, a 7x7 stride-2 stem, the
// max-pool, a block of two 3x3 layers with the pool's output as residual, a
// block with a stride-2 first layer and a 1x1 shortcut beside it, a third
// block, and the average pool.
type chain struct {
	in                 Layout
	stem               *Layer
	pool               *MaxPool
	a1, a2, b1, bd, b2 *Layer
	c1, c2             *Layer
	n                  int
	imgs               [][]float32
}

func newChain(t *testing.T, rng *rand.Rand, kern string, tile, n int) *chain {
	t.Helper()
	ch := &chain{in: Layout{H: 23, W: 19, C: 3, Pitch: 3, Pad: 3}, n: n}
	layer := func(in Layout, out, k, stride, pad int, relu bool) *Layer {
		l, err := newLayer(Spec{
			In: in, Out: out, K: k, Stride: stride, Pad: pad, OutPad: 1, ReLU: relu, Kernel: kern,
			Weight: randSlice(rng, out*in.C*k*k), Bias: randSlice(rng, out),
		}, tile)
		require.NoError(t, err)
		return l
	}
	ch.stem = layer(ch.in, 32, 7, 2, 3, true)
	var err error
	ch.pool, err = NewMaxPool(ch.stem.Out(), 1)
	require.NoError(t, err)
	p := ch.pool.Out()
	ch.a1, ch.a2 = layer(p, 32, 3, 1, 1, true), layer(p, 32, 3, 1, 1, true)
	ch.b1, ch.bd = layer(p, 64, 3, 2, 1, true), layer(p, 64, 1, 2, 0, false)
	ch.b2 = layer(ch.b1.Out(), 64, 3, 1, 1, true)
	ch.c1, ch.c2 = layer(ch.b2.Out(), 64, 3, 1, 1, true), layer(ch.b2.Out(), 64, 3, 1, 1, true)
	for i := 0; i < n; i++ {
		ch.imgs = append(ch.imgs, randSlice(rng, 3*ch.in.H*ch.in.W))
	}
	return ch
}

// run computes the chain into fresh buffers full of NaNs, as one job if
// overlap, else step by step, and returns every buffer. war makes the third
// block's first layer write the buffer the second block's last layer reads
// (its step must then wait for the whole step before).
func (ch *chain) run(t *testing.T, r *Runner, overlap, war bool) [][]float32 {
	t.Helper()
	if overlap {
		r.Begin()
	}
	bufs := ch.queue(t, r, war)
	if overlap {
		require.NoError(t, r.End())
	}
	return bufs
}

// queue runs the chain's steps, or queues them between Begin and End.
func (ch *chain) queue(t *testing.T, r *Runner, war bool) [][]float32 {
	n := ch.n
	x, stem, p := nans(ch.in.Size(n)), nans(ch.stem.Out().Size(n)), nans(ch.pool.Out().Size(n))
	t0, t1 := nans(ch.b1.Out().Size(n)), nans(ch.b1.Out().Size(n))
	ta, a := nans(ch.a1.Out().Size(n)), nans(ch.a2.Out().Size(n))
	s, c, feat := nans(ch.bd.Out().Size(n)), nans(ch.c2.Out().Size(n)), nans(64*n)
	b := p[:ch.b2.Out().Size(n)] // the second block's output, where the pool's was
	c1out := t1
	if war {
		c1out = t0
	}
	require.NoError(t, r.Input(ch.in, ch.imgs, x))
	require.NoError(t, r.Run(ch.stem, n, x, stem, nil))
	require.NoError(t, r.Pool(ch.pool, n, stem, p))
	require.NoError(t, r.Run(ch.a1, n, p, ta, nil))
	require.NoError(t, r.Run(ch.a2, n, ta, a, p))
	require.NoError(t, r.Run2(n, Conv{L: ch.b1, In: a, Out: t0}, Conv{L: ch.bd, In: a, Out: s}))
	require.NoError(t, r.Run(ch.b2, n, t0, b, s))
	require.NoError(t, r.Run(ch.c1, n, b, c1out, nil))
	require.NoError(t, r.Run(ch.c2, n, c1out, c, b))
	require.NoError(t, r.Mean(ch.c2.Out(), n, c, feat))
	return [][]float32{x, stem, p, ta, a, t0, s, t1, c, feat}
}

// TestOverlap checks that the steps of a job, which overlap, write exactly
// what they write one job at a time, on every kernel family and Winograd
// tile and on 1, 3 and 7 threads (more than this machine's CPUs): a task
// that read rows before they were written would read NaNs (and, under the
// race detector, race with the task writing them).
func TestOverlap(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, kern := range Kernels() {
		for _, tile := range []int{0, 2, 4} {
			ch := newChain(t, rng, kern, tile, 3)
			for _, threads := range []int{1, 3, 7} {
				ctx, err := gemm.New(gemm.Config{Threads: threads})
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, ctx.Close()) })
				r := NewRunner(ctx)
				want := ch.run(t, r, false, false)
				for _, v := range want[len(want)-1] {
					require.False(t, v != v, "the serial run left a NaN in the features")
				}
				t.Run(fmt.Sprintf("kernel=%s/tile=%d/threads=%d", kern, tile, threads), func(t *testing.T) {
					for rep := 0; rep < 5; rep++ {
						got := ch.run(t, r, true, false)
						for i := range want {
							require.Equal(t, want[i], got[i], "buffer %d, run %d", i, rep)
						}
					}
					// The same with a step that overwrites what the
					// step before reads: the serial run computes the same
					// features.
					wantWAR := ch.run(t, r, false, true)
					gotWAR := ch.run(t, r, true, true)
					require.Equal(t, wantWAR[len(wantWAR)-1], gotWAR[len(gotWAR)-1])
				})
			}
		}
	}
}

// TestOverlapLinks checks what the steps of the chain wait for.
func TestOverlapLinks(t *testing.T) {
	ctx, err := gemm.New(gemm.Config{Threads: 2})
	require.NoError(t, err)
	defer ctx.Close()
	rng := rand.New(rand.NewPCG(13, 14))
	for _, war := range []bool{false, true} {
		ch := newChain(t, rng, "", 0, 2)
		r := NewRunner(ctx)
		// Queue the chain, then look at the links instead of running it.
		r.Begin()
		ch.queue(t, r, war)
		steps := r.steps[:r.queued]
		type link struct {
			barrier bool
			deps    []string
		}
		got := make([]link, len(steps))
		for i, s := range steps {
			if i == 0 {
				continue
			}
			s.link(steps[i-1])
			got[i].barrier = s.barrier
			for _, d := range s.deps {
				out := 0
				if d.p == &steps[i-1].outs[1] {
					out = 1
				}
				got[i].deps = append(got[i].deps, fmt.Sprintf("conv%d res=%v out%d", d.conv, d.res, out))
			}
		}
		r.clear()
		c1 := link{deps: []string{"conv0 res=false out0"}}
		if war {
			c1 = link{barrier: true}
		}
		assert.Equal(t, []link{
			{},                                       // input
			{deps: []string{"conv0 res=false out0"}}, // stem
			{deps: []string{"conv0 res=false out0"}}, // pool
			{deps: []string{"conv0 res=false out0"}}, // a1
			{deps: []string{"conv0 res=false out0"}}, // a2 (its residual is two steps back)
			{deps: []string{"conv0 res=false out0", "conv1 res=false out0"}}, // b1 and bd
			{deps: []string{"conv0 res=false out0", "conv0 res=true out1"}},  // b2
			c1,
			{deps: []string{"conv0 res=false out0"}}, // c2
			{deps: []string{"conv0 res=false out0"}}, // mean
		}, got, "war=%v", war)
	}
}

// TestOverlapPanic checks that a job whose task panics returns the panic as
// an error: the tasks that wait for what it would have written give up
// rather than wait for ever.
func TestOverlapPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	ch := newChain(t, rng, "", 0, 2)
	for _, threads := range []int{1, 3} {
		ctx, err := gemm.New(gemm.Config{Threads: threads})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, ctx.Close()) })
		r := NewRunner(ctx)
		r.Begin()
		ch.queue(t, r, false)
		// The stem's tasks read past their input, which the checks of Run
		// would have refused.
		r.steps[1].convs[0].in = r.steps[1].convs[0].in[:1]
		assert.ErrorContains(t, r.End(), "panicked", "threads=%d", threads)
		assert.Zero(t, r.queued)
		// A step that fails its checks drops the job: the next step runs
		// at once, and End has nothing to run.
		r.Begin()
		require.NoError(t, r.Input(ch.in, ch.imgs, make([]float32, ch.in.Size(ch.n))))
		assert.ErrorContains(t, r.Input(ch.in, ch.imgs, nil), "conv: output has 0 values")
		x := nans(ch.in.Size(ch.n))
		require.NoError(t, r.Input(ch.in, ch.imgs, x))
		assert.Zero(t, r.queued, "a step after a refused one runs at once")
		assert.False(t, x[ch.in.Offset(0, 0, 0)] != x[ch.in.Offset(0, 0, 0)], "the step ran")
		require.NoError(t, r.End())
		assert.Zero(t, r.queued)
		// The Runner runs the next job.
		want := ch.run(t, r, false, false)
		got := ch.run(t, r, true, false)
		assert.Equal(t, want, got, "threads=%d", threads)
	}
}

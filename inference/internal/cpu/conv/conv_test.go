package conv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/internal/cpu/gemm"
)

func randSlice(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// randTensor returns n images in layout l with random channels and zero
// padding, and the same values as NCHW (n x C x H x W).
func randTensor(rng *rand.Rand, n int, l Layout) (padded, nchw []float32) {
	padded = make([]float32, l.Size(n))
	nchw = make([]float32, n*l.C*l.H*l.W)
	for i := 0; i < n; i++ {
		for c := 0; c < l.C; c++ {
			for y := 0; y < l.H; y++ {
				for x := 0; x < l.W; x++ {
					v := float32(rng.NormFloat64())
					padded[l.Offset(i, y, x)+c] = v
					nchw[((i*l.C+c)*l.H+y)*l.W+x] = v
				}
			}
		}
	}
	return padded, nchw
}

// naive is the reference: the convolution of NCHW x with OIHW w in float64,
// with the epilogue; res is NCHW too. It returns NCHW.
func naive(s Spec, n int, x, res []float32) []float64 {
	in := s.In
	oh, ow := (in.H+2*s.Pad-s.K)/s.Stride+1, (in.W+2*s.Pad-s.K)/s.Stride+1
	y := make([]float64, n*s.Out*oh*ow)
	for i := 0; i < n; i++ {
		for o := 0; o < s.Out; o++ {
			for oy := 0; oy < oh; oy++ {
				for ox := 0; ox < ow; ox++ {
					var sum float64
					for c := 0; c < in.C; c++ {
						for ky := 0; ky < s.K; ky++ {
							iy := oy*s.Stride - s.Pad + ky
							if iy < 0 || iy >= in.H {
								continue
							}
							for kx := 0; kx < s.K; kx++ {
								ix := ox*s.Stride - s.Pad + kx
								if ix < 0 || ix >= in.W {
									continue
								}
								sum += float64(s.Weight[((o*in.C+c)*s.K+ky)*s.K+kx]) * float64(x[((i*in.C+c)*in.H+iy)*in.W+ix])
							}
						}
					}
					j := ((i*s.Out+o)*oh+oy)*ow + ox
					if s.Bias != nil {
						sum += float64(s.Bias[o])
					}
					if res != nil {
						sum += float64(res[j])
					}
					if s.ReLU && sum < 0 {
						sum = 0
					}
					y[j] = sum
				}
			}
		}
	}
	return y
}

// nans returns n NaNs: an output buffer in which every value a layer must
// write shows whether it was.
func nans(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.NaN())
	}
	return out
}

func contexts(t testing.TB) []*gemm.Context {
	t.Helper()
	var cs []*gemm.Context
	for _, threads := range []int{1, 3} {
		c, err := gemm.New(gemm.Config{Threads: threads})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, c.Close()) })
		cs = append(cs, c)
	}
	return cs
}

func TestLayer(t *testing.T) {
	cases := []struct {
		name         string
		n            int
		in           Layout
		out, k       int
		stride, pad  int
		outPad       int
		relu, resAdd bool
	}{
		{"3x3", 2, Layout{H: 9, W: 11, C: 16, Pitch: 16, Pad: 1}, 64, 3, 1, 1, 1, true, false},
		{"3x3-residual", 2, Layout{H: 8, W: 13, C: 32, Pitch: 32, Pad: 1}, 64, 3, 1, 1, 1, true, true},
		{"3x3-stride2", 3, Layout{H: 13, W: 10, C: 16, Pitch: 16, Pad: 1}, 32, 3, 2, 1, 1, true, false},
		{"1x1-stride2-in-padded", 2, Layout{H: 15, W: 15, C: 16, Pitch: 16, Pad: 1}, 48, 1, 2, 0, 1, false, false},
		{"stem", 2, Layout{H: 37, W: 41, C: 3, Pitch: 3, Pad: 3}, 64, 7, 2, 3, 1, true, false},
		{"odd-channels", 2, Layout{H: 7, W: 9, C: 5, Pitch: 16, Pad: 1}, 7, 3, 1, 1, 2, true, true},
		{"wide-rows", 1, Layout{H: 3, W: 63, C: 64, Pitch: 64, Pad: 1}, 64, 3, 1, 1, 1, true, false},
		{"five-units", 2, Layout{H: 6, W: 6, C: 16, Pitch: 16, Pad: 1}, 80, 3, 1, 1, 0, false, true},
		{"narrow", 3, Layout{H: 2, W: 2, C: 32, Pitch: 32, Pad: 1}, 64, 3, 1, 1, 1, true, true},
		{"pitch-past-channels", 2, Layout{H: 5, W: 7, C: 40, Pitch: 48, Pad: 2}, 32, 3, 1, 1, 1, true, true},
		{"kernel-wider-than-input", 3, Layout{H: 3, W: 2, C: 2, Pitch: 2, Pad: 2}, 9, 5, 1, 2, 0, false, false},
		{"odd-size-many-groups", 3, Layout{H: 9, W: 7, C: 64, Pitch: 64, Pad: 1}, 96, 3, 1, 1, 1, true, true},
		{"one-pixel", 2, Layout{H: 1, W: 1, C: 32, Pitch: 32, Pad: 1}, 64, 3, 1, 1, 1, true, true},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kern := range Kernels() {
		for _, ctx := range contexts(t) {
			r := NewRunner(ctx)
			for _, tc := range cases {
				for _, tile := range []int{0, 2, 4} {
					wino := tile != 0
					if wino && (tc.k != 3 || tc.stride != 1 || tc.pad != 1) {
						continue
					}
					name := fmt.Sprintf("kernel=%s/threads=%d/%s/winograd-tile=%d", kern, ctx.Threads(), tc.name, tile)
					t.Run(name, func(t *testing.T) {
						s := Spec{
							In: tc.in, Out: tc.out, K: tc.k, Stride: tc.stride, Pad: tc.pad, OutPad: tc.outPad,
							Weight: randSlice(rng, tc.out*tc.in.C*tc.k*tc.k), Bias: randSlice(rng, tc.out),
							ReLU: tc.relu, Kernel: kern,
						}
						l, err := newLayer(s, tile)
						require.NoError(t, err)
						assert.Equal(t, kern, l.Kernel())
						assert.Equal(t, wino, l.wino != nil, "Winograd")
						ol := l.Out()
						x, xNCHW := randTensor(rng, tc.n, tc.in)
						var res, resNCHW []float32
						if tc.resAdd {
							res, resNCHW = randTensor(rng, tc.n, ol)
						}
						// Poison the output: every value must be written.
						got := nans(ol.Size(tc.n) + 7)
						require.NoError(t, r.Run(l, tc.n, x, got, res))
						want := naive(s, tc.n, xNCHW, resNCHW)
						tol := 1e-5 * (1 + float64(tc.in.C*tc.k*tc.k))
						bad := 0
						for i := 0; i < tc.n; i++ {
							for y := -ol.Pad; y < ol.H+ol.Pad; y++ {
								for xx := -ol.Pad; xx < ol.W+ol.Pad; xx++ {
									for c := 0; c < ol.Pitch; c++ {
										var w float64
										if y >= 0 && y < ol.H && xx >= 0 && xx < ol.W && c < ol.C {
											w = want[((i*ol.C+c)*ol.H+y)*ol.W+xx]
										}
										g := got[ol.Offset(i, y, xx)+c]
										if !(math.Abs(float64(g)-w) <= tol) {
											if bad < 5 {
												t.Errorf("image %d (%d, %d) channel %d = %v, want %v", i, y, xx, c, g, w)
											}
											bad++
										}
									}
								}
							}
						}
						assert.Zero(t, bad, "values outside tolerance %g", tol)
						for i := ol.Size(tc.n); i < len(got); i++ {
							assert.True(t, math.IsNaN(float64(got[i])), "value %d past the output was written", i)
						}
					})
				}
			}
		}
	}
}

// TestKernels checks every kernel of every family against the generic
// kernel on one tile with random strides and every epilogue.
func TestKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, fam := range families() {
		for g, maxP := range fam.maxP {
			for p := 1; p <= maxP; p++ {
				t.Run(fmt.Sprintf("kernel=%s/p=%d/g=%d", fam.name, p, g), func(t *testing.T) {
					v := g * unit
					tl := tile{nky: 2, nkx: 3, nc: 1 + rng.IntN(9), xrow: 150, xcol: 11, xpix: 23, opix: v + 5}
					tl.x = randSlice(rng, (tl.nky-1)*tl.xrow+(tl.nkx-1)*tl.xcol+tl.nc+(p-1)*tl.xpix)
					tl.w = randSlice(rng, tl.nky*tl.nkx*tl.nc*v)
					tl.bias = randSlice(rng, v)
					tl.res = randSlice(rng, (p-1)*tl.opix+v)
					for flags := 0; flags < 16; flags++ {
						tl.flags = flags
						init := randSlice(rng, (p-1)*tl.opix+v)
						want := append([]float32(nil), init...)
						tl.out = want
						genericKernel(p, g, &tl)
						got := append([]float32(nil), init...)
						tl.out = got
						fam.run(p, g, &tl)
						for i := range got {
							require.InDelta(t, want[i], got[i], 1e-4, "flags %b, value %d", flags, i)
						}
					}
				})
			}
		}
	}
}

func TestKernelBounds(t *testing.T) {
	for _, fam := range families() {
		t.Run(fam.name, func(t *testing.T) {
			tl := tile{nky: 1, nkx: 1, nc: 4, xpix: 4, opix: 16}
			tl.x, tl.w, tl.out = make([]float32, 7), make([]float32, 64), make([]float32, 32)
			// Two pixels read x[0:8], one more than x holds.
			assert.Panics(t, func() { fam.run(2, 1, &tl) })
		})
	}
}

func TestPixels(t *testing.T) {
	cases := []struct{ ow, maxP, want int }{
		{63, 6, 6}, {8, 6, 4}, {125, 6, 6}, {2, 6, 2}, {1, 12, 1}, {5, 0, 0}, {24, 12, 12},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, pixels(tc.ow, tc.maxP), "pixels(%d, %d)", tc.ow, tc.maxP)
	}
}

func TestNewLayerErrors(t *testing.T) {
	in := Layout{H: 4, W: 4, C: 2, Pitch: 2, Pad: 1}
	w := make([]float32, 3*2*9)
	cases := []struct {
		name string
		s    Spec
		want string
	}{
		{"bad layout", Spec{In: Layout{H: 4, W: 4, C: 3, Pitch: 2}, Out: 1, K: 1, Stride: 1, Weight: w[:6]}, "bad input layout"},
		{"bad stride", Spec{In: in, Out: 3, K: 3, Stride: 0, Pad: 1, Weight: w}, "bad layer"},
		{"padding", Spec{In: in, Out: 3, K: 3, Stride: 1, Pad: 2, Weight: w}, "input padding 1"},
		{"weights", Spec{In: in, Out: 3, K: 3, Stride: 1, Pad: 1, Weight: w[:5]}, "5 weights"},
		{"bias", Spec{In: in, Out: 3, K: 3, Stride: 1, Pad: 1, Weight: w, Bias: w[:2]}, "2 biases"},
		{"too small", Spec{In: Layout{H: 2, W: 2, C: 2, Pitch: 2}, Out: 3, K: 3, Stride: 1, Weight: w}, "2x2 input is smaller than"},
		{"kernel", Spec{In: in, Out: 3, K: 3, Stride: 1, Pad: 1, Weight: w, Kernel: "nope"}, `kernel "nope"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewLayer(tc.s)
			assert.ErrorContains(t, err, "conv: "+tc.want)
		})
	}
}

func TestRunErrors(t *testing.T) {
	ctx, err := gemm.New(gemm.Config{Threads: 1})
	require.NoError(t, err)
	defer ctx.Close()
	l, err := NewLayer(Spec{In: Layout{H: 4, W: 4, C: 2, Pitch: 2, Pad: 1}, Out: 3, K: 3, Stride: 1, Pad: 1, Weight: make([]float32, 54)})
	require.NoError(t, err)
	in, out := make([]float32, l.In().Size(2)), make([]float32, l.Out().Size(2))
	r := NewRunner(ctx)
	assert.ErrorContains(t, r.Run(l, 0, in, out, nil), "conv: 0 images")
	assert.ErrorContains(t, r.Run(l, 3, in, out, nil), "conv: input has")
	assert.ErrorContains(t, r.Run(l, 2, in, out[:5], nil), "conv: output has")
	assert.ErrorContains(t, r.Run(l, 2, in, out, out[:5]), "conv: residual has")
	require.NoError(t, ctx.Close())
	assert.ErrorIs(t, r.Run(l, 2, in, out, nil), gemm.ErrClosed)
}

func TestRunAllocs(t *testing.T) {
	ctx, err := gemm.New(gemm.Config{Threads: 2})
	require.NoError(t, err)
	defer ctx.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tile := range []int{0, 2, 4} {
		in := Layout{H: 9, W: 11, C: 32, Pitch: 32, Pad: 1} // odd: Winograd has edge tiles
		l, err := newLayer(Spec{In: in, Out: 32, K: 3, Stride: 1, Pad: 1, OutPad: 1, Weight: randSlice(rng, 32*32*9), ReLU: true}, tile)
		require.NoError(t, err)
		x, _ := randTensor(rng, 2, in)
		res, _ := randTensor(rng, 2, l.Out())
		y := make([]float32, l.Out().Size(2))
		r := NewRunner(ctx)
		// AllocsPerRun's first call is not counted: the Winograd scratch is
		// made then.
		allocs := testing.AllocsPerRun(20, func() {
			if err := r.Run(l, 2, x, y, res); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, "allocations per Run, Winograd tile %d", tile)
	}
}

// TestRun2 checks that two convolutions as one step write exactly what
// they write one after the other: a block's stride-2 first convolution with
// its shortcut's (both direct), and a Winograd layer with a direct one
// (the second's residual taken too), on every kernel family and one and
// three threads.
func TestRun2(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	in := Layout{H: 13, W: 11, C: 32, Pitch: 32, Pad: 1}
	for _, kern := range Kernels() {
		spec := func(out, k, stride, pad int, relu bool) Spec {
			return Spec{
				In: in, Out: out, K: k, Stride: stride, Pad: pad, OutPad: 1, ReLU: relu, Kernel: kern,
				Weight: randSlice(rng, out*in.C*k*k), Bias: randSlice(rng, out),
			}
		}
		conv1, err := newLayer(spec(64, 3, 2, 1, true), 0)
		require.NoError(t, err)
		down, err := newLayer(spec(64, 1, 2, 0, false), 0)
		require.NoError(t, err)
		wino, err := newLayer(spec(48, 3, 1, 1, true), 4)
		require.NoError(t, err)
		direct, err := newLayer(spec(48, 3, 1, 1, false), 0)
		require.NoError(t, err)
		require.Equal(t, conv1.Out(), down.Out())
		for _, ctx := range contexts(t) {
			r := NewRunner(ctx)
			for _, pair := range []struct {
				name string
				a, b *Layer
				res  bool
			}{{"conv1+down", conv1, down, false}, {"winograd+direct", wino, direct, true}} {
				t.Run(fmt.Sprintf("kernel=%s/threads=%d/%s", kern, ctx.Threads(), pair.name), func(t *testing.T) {
					const n = 3
					x, _ := randTensor(rng, n, in)
					var res []float32
					if pair.res {
						res, _ = randTensor(rng, n, pair.b.Out())
					}
					wantA, wantB := make([]float32, pair.a.Out().Size(n)), make([]float32, pair.b.Out().Size(n))
					require.NoError(t, r.Run(pair.a, n, x, wantA, nil))
					require.NoError(t, r.Run(pair.b, n, x, wantB, res))
					gotA, gotB := nans(len(wantA)), nans(len(wantB))
					require.NoError(t, r.Run2(n, Conv{L: pair.a, In: x, Out: gotA}, Conv{L: pair.b, In: x, Out: gotB, Res: res}))
					assert.Equal(t, wantA, gotA, "first convolution")
					assert.Equal(t, wantB, gotB, "second convolution")
				})
			}
			t.Run(fmt.Sprintf("kernel=%s/threads=%d/errors", kern, ctx.Threads()), func(t *testing.T) {
				x := make([]float32, in.Size(2))
				a, b := make([]float32, conv1.Out().Size(2)), make([]float32, down.Out().Size(2))
				assert.ErrorContains(t, r.Run2(2, Conv{L: conv1, In: x, Out: a}, Conv{L: down, In: x, Out: b[:7]}), "conv: output has 7 values")
				assert.ErrorContains(t, r.Run2(2, Conv{In: x, Out: a}, Conv{}), "conv: no layer")
				assert.ErrorContains(t, r.Run2(0, Conv{L: conv1, In: x, Out: a}, Conv{L: down, In: x, Out: b}), "conv: 0 images")
				assert.Zero(t, r.queued, "a refused step is not queued")
				for _, s := range r.steps {
					assert.Equal(t, [2]convRun{}, s.convs, "a refused step keeps no buffers")
				}
				allocs := testing.AllocsPerRun(10, func() {
					if err := r.Run2(2, Conv{L: conv1, In: x, Out: a}, Conv{L: down, In: x, Out: b}); err != nil {
						t.Fatal(err)
					}
				})
				assert.Zero(t, allocs, "allocations per Run2")
			})
		}
	}
}

// TestDirectSets checks how groups are cut into sets, and that a task of
// several groups writes exactly what tasks of one group each write, on
// every kernel family (whichever cut its family takes by default), with
// groups of mixed sizes where a family has them.
func TestDirectSets(t *testing.T) {
	g := func(units ...int) []group {
		var gs []group
		for i, u := range units {
			gs = append(gs, group{u0: i, units: u})
		}
		return gs
	}
	// per = 100 values an output channel: a 1-unit group holds 6400 bytes.
	assert.Equal(t, []int{0, 1, 2, 3}, directSets(g(1, 1, 1), 100, 0), "no budget: a group a set")
	assert.Equal(t, []int{0, 2, 3}, directSets(g(1, 1, 1), 100, 12800), "two groups fit")
	assert.Equal(t, []int{0, 1, 2}, directSets(g(4, 1), 100, 12800), "a group over the budget is a set alone")
	assert.Equal(t, []int{0, 3}, directSets(g(1, 1, 1), 100, 1<<20))

	rng := rand.New(rand.NewPCG(11, 12))
	in := Layout{H: 13, W: 11, C: 32, Pitch: 32, Pad: 1}
	for _, kern := range Kernels() {
		for _, k := range []int{1, 3} {
			l, err := newLayer(Spec{
				In: in, Out: 80, K: k, Stride: 2, Pad: k / 2, OutPad: 1, ReLU: true, Kernel: kern,
				Weight: randSlice(rng, 80*32*k*k), Bias: randSlice(rng, 80),
			}, 0)
			require.NoError(t, err)
			if kern == "avx2" {
				assert.Len(t, l.sets, 2, "avx2: every group of this small layer in one set")
			}
			x, _ := randTensor(rng, 3, in)
			res, _ := randTensor(rng, 3, l.Out())
			per := k * k * in.Pitch
			var outs [][]float32
			for _, most := range []int{0, 1 << 30} {
				l.sets = directSets(l.groups, per, most)
				out := nans(l.Out().Size(3))
				for _, ctx := range contexts(t) {
					require.NoError(t, NewRunner(ctx).Run(l, 3, x, out, res))
				}
				for i, v := range out {
					require.False(t, math.IsNaN(float64(v)), "kernel %s, %dx%d, set budget %d: value %d not written", kern, k, k, most, i)
				}
				outs = append(outs, out)
			}
			assert.Equal(t, outs[0], outs[1], "kernel %s, %dx%d: a set of every group against a group a set", kern, k, k)
		}
	}
}

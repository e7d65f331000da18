package conv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWinogradTransforms checks the assembly transforms against the Go ones
// (the same additions in the same order: equal to the bit), on blocks with
// strides that are not the tight ones, in every instruction set this CPU
// has for them.
func TestWinogradTransforms(t *testing.T) {
	if !slices.ContainsFunc(Kernels(), winogradAsm) {
		t.Skip("no AVX2 or AVX-512 here: the Go transforms are the only ones")
	}
	withWinoISAs(t, testWinogradTransforms)
}

func testWinogradTransforms(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	checkWinograd(t, rng, 2, winogradInAsm, winogradInGo, winogradOutAsm, winogradOutGo)
	assert.Panics(t, func() { winogradInAsm(make([]float32, 16), 1, make([]float32, 64), 1, 1, 16) }, "short destination")
}

// checkWinograd checks the assembly transforms of m x m tiles against the
// Go ones, to the bit, on blocks with strides that are not the tight ones,
// for 16, 48 and 64 channels: the input transform in against inRef, and
// the output transform out against outRef and the epilogue (see
// checkWinogradOut).
func checkWinograd(t *testing.T, rng *rand.Rand, m int,
	in, inRef func(dst []float32, stride int, src []float32, row, pix, n int),
	out func(dst []float32, row, pix int, src []float32, stride int, bias, res []float32, relu bool, n int),
	outRef func(y, src []float32, stride, n int)) {
	t.Helper()
	a := m + 2
	for _, n := range []int{16, 48, 64} {
		row, pix, stride := (a+1)*n+7, n+3, 2*n+1
		src := randSlice(rng, (a-1)*(row+pix)+n)
		got, want := randSlice(rng, (a*a-1)*stride+n), randSlice(rng, (a*a-1)*stride+n)
		copy(got, want)
		in(got, stride, src, row, pix, n)
		inRef(want, stride, src, row, pix, n)
		require.Equal(t, want, got, "%dx%d input transform, n=%d", m, m, n)
		checkWinogradOut(t, rng, m, n, row, pix, stride, out, outRef)
	}
}

// checkWinogradOut checks the output transform asm of m x m tiles against
// the Go transform ref and the epilogue, to the bit, for n channels, with
// and without a residual and a ReLU; it also checks that asm writes no
// value outside the tile's pixels.
func checkWinogradOut(t *testing.T, rng *rand.Rand, m, n, row, pix, stride int,
	asm func(dst []float32, row, pix int, src []float32, stride int, bias, res []float32, relu bool, n int),
	ref func(y, src []float32, stride, n int)) {
	t.Helper()
	a := m + 2
	prods := randSlice(rng, (a*a-1)*stride+n)
	size := (m-1)*(row+pix) + n
	bias, res := randSlice(rng, n), randSlice(rng, size)
	y := make([]float32, m*m*n)
	ref(y, prods, stride, n)
	for _, relu := range []bool{false, true} {
		for _, r := range [][]float32{nil, res} {
			out := randSlice(rng, size)
			init := slices.Clone(out)
			asm(out, row, pix, slices.Clone(prods), stride, bias, r, relu, n) // F(4x4)'s overwrites its src
			for dy := 0; dy < m; dy++ {
				for dx := 0; dx < m; dx++ {
					o := dy*row + dx*pix
					for ch := 0; ch < n; ch++ {
						s := y[(m*dy+dx)*n+ch] + bias[ch]
						if r != nil {
							s += r[o+ch]
						}
						if relu && s < 0 {
							s = 0
						}
						require.Equal(t, s, out[o+ch], "%dx%d output transform, n=%d, relu %v, residual %v, (%d, %d) channel %d", m, m, n, relu, r != nil, dy, dx, ch)
						init[o+ch] = s
					}
				}
			}
			assert.Equal(t, init, out, "values outside the tile's pixels were written")
		}
	}
}

// TestWinogradChoice checks NewLayer's plan under each Spec.Tile, with
// this CPU's fastest kernel family.
func TestWinogradChoice(t *testing.T) {
	family := Kernels()[0]
	rng := rand.New(rand.NewPCG(21, 22))
	for _, tc := range []struct {
		tile    int
		c, k    int
		wino    []string // the families that run it with Winograd
		wantErr string
	}{
		{tile: 0, c: 64, k: 3, wino: []string{"avx512", "avx2"}},
		{tile: 0, c: 256, k: 3, wino: []string{"avx512", "avx2"}},
		{tile: 0, c: 512, k: 3, wino: []string{"avx512", "avx2"}},
		{tile: 0, c: 16, k: 3}, // too few channels
		{tile: 0, c: 64, k: 1}, // not 3x3
		{tile: 4, c: 16, k: 3}, // a tile asked for, but the rule runs it direct
		{tile: 2, c: 64, k: 3, wino: []string{"avx512", "avx2"}},
		{tile: -1, c: 64, k: 3},
		{tile: 3, c: 64, k: 3, wantErr: "conv: Winograd tile 3"},
	} {
		t.Run(fmt.Sprintf("tile=%d/c=%d/k=%d", tc.tile, tc.c, tc.k), func(t *testing.T) {
			in := Layout{H: 4, W: 4, C: tc.c, Pitch: tc.c, Pad: 1}
			l, err := NewLayer(Spec{In: in, Out: tc.c, K: tc.k, Stride: 1, Pad: tc.k / 2, OutPad: 1,
				Weight: randSlice(rng, tc.c*tc.c*tc.k*tc.k), Tile: tc.tile})
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			wino := slices.Contains(tc.wino, family)
			assert.Equal(t, wino, l.wino != nil, "Winograd plan with %s kernels", family)
			assert.Equal(t, !wino, l.w != nil, "direct weights with %s kernels", family)
		})
	}
}

// TestWinogradTileChoice checks the tiles NewLayer picks, by its rule and
// as Spec.Tile asks, with this CPU's fastest kernel family.
func TestWinogradTileChoice(t *testing.T) {
	family := Kernels()[0]
	if !winogradAsm(family) {
		t.Skipf("%s kernels run no Winograd layers", family)
	}
	def := map[string]int{"avx2": 4, "avx512": 2}[family]
	rng := rand.New(rand.NewPCG(23, 24))
	const few = 4 // either family, up to 128 x 128 channels on up to winoDirectThreads threads
	for _, tc := range []struct {
		tile    int
		c       int // channels in and out
		threads int // Spec.Threads
		want    int
	}{
		{0, 64, 0, def}, {2, 64, 0, 2}, {4, 64, 0, 4},
		{0, 512, 0, 2}, // stage 4: 2x2 for either family
		{4, 512, 0, 4},
		{0, 64, 2, few}, {0, 128, 1, few}, {0, 64, 16, def},
		{0, 512, 2, 2},
		{2, 64, 2, 2},
	} {
		t.Run(fmt.Sprintf("tile=%d/c=%d/threads=%d", tc.tile, tc.c, tc.threads), func(t *testing.T) {
			in := Layout{H: 6, W: 6, C: tc.c, Pitch: tc.c, Pad: 1}
			l, err := NewLayer(Spec{In: in, Out: tc.c, K: 3, Stride: 1, Pad: 1, OutPad: 1, Weight: randSlice(rng, tc.c*tc.c*9),
				Tile: tc.tile, Threads: tc.threads})
			require.NoError(t, err)
			require.NotNil(t, l.wino)
			assert.Equal(t, tc.want, l.wino.m, "tile with %s kernels", family)
			assert.Equal(t, (6+tc.want-1)/tc.want, l.wino.th, "tiles down a 6x6 output")
		})
	}
}

// TestGroupSets checks the runs of channel groups a Winograd task covers:
// in order, at most 4 units (64 channels, the products' scratch) a run.
func TestGroupSets(t *testing.T) {
	for _, tc := range []struct {
		units []int
		want  []int
	}{
		{[]int{4, 4, 4}, []int{0, 1, 2, 3}},          // avx512: a group a set
		{[]int{1, 1, 1, 1, 1, 1}, []int{0, 4, 6}},    // avx2: four groups a set
		{[]int{2, 1, 1, 2, 1}, []int{0, 3, 5}},       // runs close at 4 units
		{[]int{4, 2, 1, 1}, []int{0, 1, 4}},          // a full group, then the rest
		{[]int{1}, []int{0, 1}},                      // one group
		{[]int{3, 2, 3, 1, 1}, []int{0, 1, 2, 4, 5}}, // 3+2 and 2+3 would pass 4
		{[]int{1, 1, 1, 1, 4, 1}, []int{0, 4, 5, 6}}, // then a group of 4 alone
	} {
		groups := make([]group, len(tc.units))
		for i, u := range tc.units {
			groups[i].units = u
		}
		assert.Equal(t, tc.want, groupSets(groups), "units %v", tc.units)
	}
}

// TestWinogradFewTilesRunDirect checks that a Winograd layer of few tiles an
// image runs a pass of one image as a direct convolution and a pass of more
// with Winograd, both right, and that a tile Spec.Tile asks for is kept.
func TestWinogradFewTilesRunDirect(t *testing.T) {
	family := Kernels()[0]
	if !winogradAsm(family) {
		t.Skipf("%s kernels run no Winograd layers", family)
	}
	rng := rand.New(rand.NewPCG(25, 26))
	in := Layout{H: 8, W: 8, C: 32, Pitch: 32, Pad: 1} // 4x4 tiles of 2x2: 16 an image
	s := Spec{In: in, Out: 32, K: 3, Stride: 1, Pad: 1, OutPad: 1, ReLU: true,
		Weight: randSlice(rng, 32*32*9), Bias: randSlice(rng, 32)}
	l, err := NewLayer(s)
	require.NoError(t, err)
	require.NotNil(t, l.wino)
	require.NotNil(t, l.direct)
	assert.Nil(t, l.direct.wino)
	assert.Same(t, l.direct, l.at(1, 2), "16 tiles on 2 threads: direct")
	assert.Same(t, l, l.at(2, 2), "32 tiles: Winograd")
	assert.Same(t, l, l.at(1, 16), "16 threads: Winograd")

	for _, ctx := range contexts(t) {
		checkFewTiles(t, rng, NewRunner(ctx), l, s, in)
	}

	s.Threads = winoDirectThreads + 1
	many, err := NewLayer(s)
	require.NoError(t, err)
	assert.Nil(t, many.direct, "more threads than winoDirectThreads: no direct plan kept")

	s.Threads, s.Tile = 0, 2
	asked, err := NewLayer(s)
	require.NoError(t, err)
	assert.Nil(t, asked.direct, "Spec.Tile keeps its plan")
	assert.Same(t, asked, asked.at(1, 1))
}

// checkFewTiles runs l (of spec s, input in) on r for passes of 1 to 3
// images and compares every output with the naive convolution.
func checkFewTiles(t *testing.T, rng *rand.Rand, r *Runner, l *Layer, s Spec, in Layout) {
	for _, n := range []int{1, 2, 3} {
		x, xNCHW := randTensor(rng, n, in)
		ol := l.Out()
		got := make([]float32, ol.Size(n))
		require.NoError(t, r.Run(l, n, x, got, nil))
		want := naive(s, n, xNCHW, nil)
		for i := 0; i < n; i++ {
			for y := 0; y < ol.H; y++ {
				for xx := 0; xx < ol.W; xx++ {
					for c := 0; c < ol.C; c++ {
						w := want[((i*ol.C+c)*ol.H+y)*ol.W+xx]
						require.InDelta(t, w, got[ol.Offset(i, y, xx)+c], 1e-5*(1+32*9), "threads=%d n=%d image %d (%d, %d) channel %d",
							r.threads.Threads(), n, i, y, xx, c)
					}
				}
			}
		}
	}
}

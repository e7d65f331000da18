package conv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/internal/gemm"
)

// TestWinogradTransforms checks the assembly transforms against the Go ones
// (the same additions in the same order: equal to the bit), on blocks with
// strides that are not the tight ones.
func TestWinogradTransforms(t *testing.T) {
	if !slices.Contains(Kernels(), "avx512") {
		t.Skip("no AVX-512 here: the Go transforms are the only ones")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{16, 48, 64} {
		row, pix, stride := 5*n+7, n+3, 2*n+1
		src := randSlice(rng, 3*row+3*pix+n)
		got, want := randSlice(rng, 15*stride+n), randSlice(rng, 15*stride+n)
		copy(got, want)
		winogradInAsm(got, stride, src, row, pix, n)
		winogradInGo(want, stride, src, row, pix, n)
		require.Equal(t, want, got, "input transform, n=%d", n)

		m := randSlice(rng, 15*stride+n)
		bias, res := randSlice(rng, n), randSlice(rng, row+pix+n)
		for _, relu := range []bool{false, true} {
			for _, r := range [][]float32{nil, res} {
				out := randSlice(rng, row+pix+n)
				init := append([]float32(nil), out...)
				winogradOutAsm(out, row, pix, m, stride, bias, r, relu, n)
				var y [2][2][4 * unit]float32
				for c0 := 0; c0 < n; c0 += 4 * unit {
					k := min(4*unit, n-c0)
					winogradOutGo(&y, m[c0:], stride, k)
					for dy := 0; dy < 2; dy++ {
						for dx := 0; dx < 2; dx++ {
							o := dy*row + dx*pix + c0
							for ch := 0; ch < k; ch++ {
								s := y[dy][dx][ch] + bias[c0+ch]
								if r != nil {
									s += r[o+ch]
								}
								if relu && s < 0 {
									s = 0
								}
								require.Equal(t, s, out[o+ch], "output transform, n=%d, relu %v, residual %v, (%d, %d) channel %d", n, relu, r != nil, dy, dx, c0+ch)
								init[o+ch] = s
							}
						}
					}
				}
				assert.Equal(t, init, out, "values outside the tile's pixels were written")
			}
		}
	}
	assert.Panics(t, func() { winogradInAsm(make([]float32, 16), 1, make([]float32, 64), 1, 1, 16) }, "short destination")
}

// TestWinogradChoice checks NewLayer's plans under each WinogradEnv value and
// that a layer with both plans runs the one Layer.direct picks: its output
// equals, to the bit, that of a layer with only that plan.
func TestWinogradChoice(t *testing.T) {
	if !slices.Contains(Kernels(), "avx512") {
		t.Skip("no AVX-512 here: Winograd runs only with its kernels")
	}
	rng := rand.New(rand.NewPCG(21, 22))
	spec := func(c int) Spec {
		in := Layout{H: 20, W: 20, C: c, Pitch: c, Pad: 1} // 100 tiles an image
		return Spec{In: in, Out: c, K: 3, Stride: 1, Pad: 1, OutPad: 1, ReLU: true,
			Weight: randSlice(rng, c*c*9), Bias: randSlice(rng, c)}
	}
	for _, tc := range []struct {
		env            string
		c              int
		wino, direct   bool
		directAtN1T2   bool // 100 tiles, fewer than 64 a thread on 2
		directAtN2T2   bool // 200 tiles
		directAtN1T1   bool
		wantErrContain string
	}{
		{env: "", c: 64, wino: true, direct: true, directAtN1T2: true},
		{env: "auto", c: 32, wino: true, direct: true, directAtN1T2: true},
		{env: "auto", c: 128, wino: true},
		{env: "on", c: 64, wino: true},
		{env: "off", c: 64, direct: true, directAtN1T2: true, directAtN2T2: true, directAtN1T1: true},
		{env: "maybe", c: 64, wantErrContain: "INFERBENCH_CONV_WINOGRAD"},
	} {
		t.Run(fmt.Sprintf("env=%s/c=%d", tc.env, tc.c), func(t *testing.T) {
			t.Setenv(WinogradEnv, tc.env)
			l, err := NewLayer(spec(tc.c))
			if tc.wantErrContain != "" {
				assert.ErrorContains(t, err, tc.wantErrContain)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wino, l.wino != nil, "Winograd plan")
			assert.Equal(t, tc.direct, l.w != nil, "direct weights")
			uses := func(n, threads int) bool { return l.wino == nil || l.direct(n, threads) }
			assert.Equal(t, tc.directAtN1T2, uses(1, 2), "direct at 1 image, 2 threads")
			assert.Equal(t, tc.directAtN2T2, uses(2, 2), "direct at 2 images, 2 threads")
			assert.Equal(t, tc.directAtN1T1, uses(1, 1), "direct at 1 image, 1 thread")
		})
	}

	// Both plans: the output is the chosen plan's, bit for bit.
	t.Setenv(WinogradEnv, "auto")
	s := spec(64)
	both, err := NewLayer(s)
	require.NoError(t, err)
	onlyDirect, err := newLayer(s, false)
	require.NoError(t, err)
	onlyWino, err := newLayer(s, true)
	require.NoError(t, err)
	x, _ := randTensor(rng, 2, s.In)
	for _, threads := range []int{1, 2} {
		ctx, err := gemm.New(gemm.Config{Threads: threads})
		require.NoError(t, err)
		r := NewRunner(ctx)
		for _, n := range []int{1, 2} {
			want := onlyWino
			if both.direct(n, threads) {
				want = onlyDirect
			}
			got, exp := make([]float32, both.Out().Size(n)), make([]float32, both.Out().Size(n))
			require.NoError(t, r.Run(both, n, x, got, nil))
			require.NoError(t, r.Run(want, n, x, exp, nil))
			assert.Equal(t, exp, got, "threads %d, %d images, direct %v", threads, n, both.direct(n, threads))
		}
		require.NoError(t, ctx.Close())
	}
}

package conv

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/cpu"
)

// TestWinograd4Matrices checks the F(4x4, 3x3) transforms against a direct
// 3x3 correlation of a 6x6 block, in float64 for the weights and float32 for
// the rest: Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A.
func TestWinograd4Matrices(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	g, d := randSlice(rng, 9), randSlice(rng, 36)
	var u [36]float64
	winograd4Weights(&u, g)
	v := make([]float32, 36)
	winograd4InGo(v, 1, d, 6, 1, 1)
	m := make([]float32, 36)
	for i := range m {
		m[i] = float32(u[i]) * v[i]
	}
	y := make([]float32, 16)
	winograd4OutGo(y, m, 1, 1)
	for r := 0; r < 4; r++ {
		for c := 0; c < 4; c++ {
			var want float64
			for i := 0; i < 3; i++ {
				for j := 0; j < 3; j++ {
					want += float64(g[i*3+j]) * float64(d[(r+i)*6+c+j])
				}
			}
			assert.InDelta(t, want, y[4*r+c], 1e-4, "output (%d, %d)", r, c)
		}
	}
}

// TestWinograd4Transforms checks the AVX2 transforms against the Go ones, to
// the bit, on blocks with strides that are not the tight ones.
func TestWinograd4Transforms(t *testing.T) {
	if !cpu.X86.HasAVX2 || !slices.ContainsFunc(Kernels(), winogradAsm) {
		t.Skip("no AVX2 here: the Go transforms are the only ones")
	}
	rng := rand.New(rand.NewPCG(43, 44))
	checkWinograd(t, rng, 4, winograd4InAsm, winograd4InGo, winograd4OutAsm, winograd4OutGo)
	assert.Panics(t, func() { winograd4InAsm(make([]float32, 16), 1, make([]float32, 256), 1, 1, 16) }, "short destination")
}

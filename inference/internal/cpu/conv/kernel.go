package conv

import (
	"fmt"
	"slices"
)

// The epilogue flags of a kernel call (gen_kernels.go uses the same values).
const (
	flagAccumulate = 1 << iota // add the tile to the output instead of overwriting it
	flagBias                   // add the bias
	flagResidual               // add the residual
	flagReLU                   // clamp at zero
)

// unit is the number of output channels in a unit: kernels compute groups of
// 1, 2 or 4 units, and tensors' pitches are whole units.
const unit = 16

// maxPixels is the largest pixel count of any kernel.
const maxPixels = 12

// tile is one kernel call: P pixels of one output row times a group of g
// units of output channels, over a reduction of nky kernel rows, nkx kernel
// columns and nc input channels. Offsets are in values, every slice starts
// at the first value the call reads or writes:
//
//	out[p*opix + o] = epilogue(sum over ky, kx, c of
//	    x[ky*xrow + kx*xcol + c + p*xpix] * w[((ky*nkx + kx)*nc + c)*g*unit + o])
//
// for o < g*unit, where the epilogue adds out[p*opix + o] (flagAccumulate),
// bias[o] (flagBias) and res[p*opix + o] (flagResidual), then clamps at zero
// (flagReLU). Layers make one run of each kernel row (nkx = 1, nc = K x
// Pitch: a row's columns lie next to each other) and do not accumulate; the
// kx loop and flagAccumulate let a reduction be split over calls, which was
// slower.
type tile struct {
	x, w, out, res, bias   []float32
	nky, nkx, nc           int
	xrow, xcol, xpix, opix int
	flags                  int
}

// kernels is one family of micro-kernels.
type kernels struct {
	name string
	// maxP[g] is the largest pixel count of a kernel for g units; a family
	// has kernels for every count from 1 to maxP[g], and none for g where
	// maxP[g] is 0. Every family has g = 1.
	maxP [5]int
	arch bool // the kernels are archKernel's, else genericKernel
}

// run calls the family's kernel for p pixels and g units. (A method rather
// than a function value, so that t does not escape.)
func (k *kernels) run(p, g int, t *tile) {
	if k.arch {
		archKernel(k.name, p, g, t)
		return
	}
	genericKernel(p, g, t)
}

// generic is the portable family, in Go.
var generic = kernels{name: "generic", maxP: [5]int{1: maxPixels, 2: maxPixels, 4: 6}}

// families lists the kernel families this build and CPU support, fastest
// first; the last is generic.
func families() []kernels { return append(archKernels(), generic) }

// Kernels lists the names of the kernel families this build and CPU support,
// fastest first: "avx512", "avx2", "generic", as gemm names its kernels.
func Kernels() []string {
	var names []string
	for _, k := range families() {
		names = append(names, k.name)
	}
	return names
}

// findKernels returns the family called name, or the fastest for "".
func findKernels(name string) (*kernels, error) {
	ks := families()
	if name == "" {
		return &ks[0], nil
	}
	i := slices.IndexFunc(ks, func(k kernels) bool { return k.name == name })
	if i < 0 {
		return nil, fmt.Errorf("conv: kernel %q is not supported here (have %v)", name, Kernels())
	}
	return &ks[i], nil
}

// genericKernel is the kernel of the portable family, for any p up to
// maxPixels and g up to 4.
func genericKernel(p, g int, t *tile) {
	v := g * unit
	var buf [maxPixels * 4 * unit]float32
	acc := buf[:p*v]
	w := t.w[:t.nky*t.nkx*t.nc*v]
	for ky := 0; ky < t.nky; ky++ {
		for kx := 0; kx < t.nkx; kx++ {
			base := ky*t.xrow + kx*t.xcol
			for c := 0; c < t.nc; c++ {
				wv := w[:v:v]
				w = w[v:]
				for px := 0; px < p; px++ {
					xv := t.x[base+c+px*t.xpix]
					a := acc[px*v : px*v+v : px*v+v]
					for o, ww := range wv {
						a[o] += xv * ww
					}
				}
			}
		}
	}
	for px := 0; px < p; px++ {
		out := t.out[px*t.opix : px*t.opix+v]
		var res []float32
		if t.flags&flagResidual != 0 {
			res = t.res[px*t.opix : px*t.opix+v]
		}
		for o, s := range acc[px*v : px*v+v] {
			if t.flags&flagAccumulate != 0 {
				s += out[o]
			}
			if t.flags&flagBias != 0 {
				s += t.bias[o]
			}
			if res != nil {
				s += res[o]
			}
			if t.flags&flagReLU != 0 && s < 0 {
				s = 0
			}
			out[o] = s
		}
	}
}

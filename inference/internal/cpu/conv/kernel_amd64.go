package conv

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate go run gen_kernels.go

// rawTile is a tile as the assembly kernels read it: pointers to the first
// values and strides in bytes.
type rawTile struct {
	x, w, out, res, bias   *float32
	nky, nkx, nc           int
	xrow, xcol, xpix, opix int
	flags                  int
}

func archKernels() []kernels {
	var ks []kernels
	if cpu.X86.HasAVX512F {
		ks = append(ks, kernels{name: "avx512", maxP: avx512MaxP, arch: true})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, kernels{name: "avx2", maxP: avx2MaxP, arch: true})
	}
	return ks
}

// archKernel calls the assembly kernel of family name for p pixels and g
// units.
func archKernel(name string, p, g int, t *tile) {
	var r rawTile
	t.raw(&r, p, g)
	if name == "avx512" {
		callAVX512(p, g, &r)
	} else {
		callAVX2(p, g, &r)
	}
}

// raw fills r for a kernel of p pixels and g units after checking that every
// value the kernel reads or writes lies inside t's slices (a failed check
// panics with an index out of range), so the kernels need no checks.
func (t *tile) raw(r *rawTile, p, g int) {
	v := g * unit
	if t.nky < 1 || t.nkx < 1 || t.nc < 1 || t.xrow < 0 || t.xcol < 0 || t.xpix < 0 || t.opix < 0 {
		panic("conv: bad tile")
	}
	_ = t.x[(t.nky-1)*t.xrow+(t.nkx-1)*t.xcol+t.nc-1+(p-1)*t.xpix]
	_ = t.w[t.nky*t.nkx*t.nc*v-1]
	last := (p-1)*t.opix + v - 1
	_ = t.out[last]
	*r = rawTile{
		x: unsafe.SliceData(t.x), w: unsafe.SliceData(t.w), out: unsafe.SliceData(t.out),
		nky: t.nky, nkx: t.nkx, nc: t.nc,
		xrow: 4 * t.xrow, xcol: 4 * t.xcol, xpix: 4 * t.xpix, opix: 4 * t.opix,
		flags: t.flags,
	}
	if t.flags&flagBias != 0 {
		_ = t.bias[v-1]
		r.bias = unsafe.SliceData(t.bias)
	}
	if t.flags&flagResidual != 0 {
		_ = t.res[last]
		r.res = unsafe.SliceData(t.res)
	}
}

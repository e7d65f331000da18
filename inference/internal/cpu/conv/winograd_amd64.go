package conv

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:noescape
func winogradInAVX512(dst *float32, stride int, src *float32, row, pix, n int)

//go:noescape
func winogradOutAVX512(dst *float32, row, pix int, src *float32, stride int, bias, res *float32, n int)

//go:noescape
func winogradInAVX2(dst *float32, stride int, src *float32, row, pix, n int)

//go:noescape
func winogradOutAVX2(dst *float32, row, pix int, src *float32, stride int, bias, res *float32, n int)

// winoAVX512 says whether the assembly transforms use AVX-512 (16
// channels a register) rather than AVX2 (8): whichever this CPU has, for
// layers of either kernel family (a test sets it false to check the AVX2
// transforms on an AVX-512 machine).
var winoAVX512 = cpu.X86.HasAVX512F

// winogradInAsm is winogradInGo in assembly for n a multiple of 16, after
// checking every index it touches (a failed check panics).
func winogradInAsm(dst []float32, stride int, src []float32, row, pix, n int) {
	if n%16 != 0 || n < 16 || stride < 0 || row < 0 || pix < 0 {
		panic("conv: bad Winograd input transform")
	}
	_ = dst[15*stride+n-1]
	_ = src[3*row+3*pix+n-1]
	if winoAVX512 {
		winogradInAVX512(unsafe.SliceData(dst), 4*stride, unsafe.SliceData(src), 4*row, 4*pix, n)
		return
	}
	winogradInAVX2(unsafe.SliceData(dst), 4*stride, unsafe.SliceData(src), 4*row, 4*pix, n)
}

// winogradOutAsm transforms a whole tile's n channels back and stores them
// at dst[r*row + c*pix:] after the epilogue (bias, res if not nil, ReLU),
// in assembly, for n a multiple of 16.
func winogradOutAsm(dst []float32, row, pix int, src []float32, stride int, bias, res []float32, relu bool, n int) {
	if n%16 != 0 || n < 16 || stride < 0 || row < 0 || pix < 0 {
		panic("conv: bad Winograd output transform")
	}
	_ = dst[row+pix+n-1]
	_ = src[15*stride+n-1]
	_ = bias[n-1]
	var rp *float32
	if res != nil {
		_ = res[row+pix+n-1]
		rp = unsafe.SliceData(res)
	}
	sn := n
	if relu {
		sn = -n
	}
	if winoAVX512 {
		winogradOutAVX512(unsafe.SliceData(dst), 4*row, 4*pix, unsafe.SliceData(src), 4*stride, unsafe.SliceData(bias), rp, sn)
		return
	}
	winogradOutAVX2(unsafe.SliceData(dst), 4*row, 4*pix, unsafe.SliceData(src), 4*stride, unsafe.SliceData(bias), rp, sn)
}

// winogradAsm reports whether the assembly transforms run here for layers
// of kernel family family: the avx512 and avx2 families' (a CPU that has
// either family has AVX2).
func winogradAsm(family string) bool { return family == "avx512" || family == "avx2" }

//go:noescape
func winograd4InAVX2(dst *float32, stride int, src *float32, row, pix, n int)

//go:noescape
func winograd4OutAVX2(dst *float32, row, pix int, src *float32, stride int, bias, res *float32, n int)

// winograd4InAsm is winograd4InGo in AVX2 for n a multiple of 16, after
// checking every index it touches (a failed check panics). It writes dst's
// 36 positions twice (the first pass's results are read back).
func winograd4InAsm(dst []float32, stride int, src []float32, row, pix, n int) {
	if n%16 != 0 || n < 16 || stride < 0 || row < 0 || pix < 0 {
		panic("conv: bad Winograd F(4x4) input transform")
	}
	_ = dst[35*stride+n-1]
	_ = src[5*row+5*pix+n-1]
	winograd4InAVX2(unsafe.SliceData(dst), 4*stride, unsafe.SliceData(src), 4*row, 4*pix, n)
}

// winograd4OutAsm transforms a whole 4x4 tile's n channels back and stores
// them at dst[r*row + c*pix:] after the epilogue (bias, res if not nil,
// ReLU), in AVX2, for n a multiple of 16. It overwrites src (the products)
// with its intermediate sums.
func winograd4OutAsm(dst []float32, row, pix int, src []float32, stride int, bias, res []float32, relu bool, n int) {
	if n%16 != 0 || n < 16 || stride < 0 || row < 0 || pix < 0 {
		panic("conv: bad Winograd F(4x4) output transform")
	}
	_ = dst[3*row+3*pix+n-1]
	_ = src[35*stride+n-1]
	_ = bias[n-1]
	var rp *float32
	if res != nil {
		_ = res[3*row+3*pix+n-1]
		rp = unsafe.SliceData(res)
	}
	sn := n
	if relu {
		sn = -n
	}
	winograd4OutAVX2(unsafe.SliceData(dst), 4*row, 4*pix, unsafe.SliceData(src), 4*stride, unsafe.SliceData(bias), rp, sn)
}

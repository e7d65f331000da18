package gemm

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

func archKernels() []microKernel {
	var ks []microKernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, microKernel{name: "avx512", mr: 8, nr: 32, full: avx512Full})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, microKernel{name: "avx2", mr: 6, nr: 16, full: avx2Full})
	}
	return ks
}

// kernel6x16AVX2 is avx2Full in assembly, without bounds checks.
//
//go:noescape
func kernel6x16AVX2(k int, a, b, c *float32, ldc, flags int, bias, res *float32, ldr int)

func avx2Full(k int, a, b, c []float32, ldc, flags int, bias, res []float32, ldr int) {
	bp, rp := checkTile(6, 16, k, a, b, c, ldc, flags, bias, res, ldr)
	kernel6x16AVX2(k, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, flags, bp, rp, ldr)
}

// checkTile panics (index out of range) unless the slices hold a full mr x nr
// tile of k steps, so the assembly kernels can run without bounds checks, and
// returns the epilogue's bias and residual pointers (nil when not used).
func checkTile(mr, nr, k int, a, b, c []float32, ldc, flags int, bias, res []float32, ldr int) (bp, rp *float32) {
	_ = a[k*mr-1]
	_ = b[k*nr-1]
	_ = c[(mr-1)*ldc+nr-1]
	if flags&flagBias != 0 {
		_ = bias[mr-1]
		bp = unsafe.SliceData(bias)
	}
	if flags&flagResidual != 0 {
		_ = res[(mr-1)*ldr+nr-1]
		rp = unsafe.SliceData(res)
	}
	return bp, rp
}

// kernel8x32AVX512 is avx512Full in assembly, without bounds checks.
//
//go:noescape
func kernel8x32AVX512(k int, a, b, c *float32, ldc, flags int, bias, res *float32, ldr int)

func avx512Full(k int, a, b, c []float32, ldc, flags int, bias, res []float32, ldr int) {
	bp, rp := checkTile(8, 32, k, a, b, c, ldc, flags, bias, res, ldr)
	kernel8x32AVX512(k, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, flags, bp, rp, ldr)
}

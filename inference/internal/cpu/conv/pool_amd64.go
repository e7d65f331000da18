package conv

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var useAVX2 = cpu.X86.HasAVX2

// max9 sets d[i] to the maximum of src[ky*row + kx*pix + i] over ky and kx in
// 0..2, for values that are not NaN.
func max9(d, src []float32, pix, row int) {
	if !useAVX2 || len(d) == 0 {
		max9Go(d, src, pix, row)
		return
	}
	if pix < 0 || row < 0 {
		panic("conv: negative stride")
	}
	_ = src[2*row+2*pix+len(d)-1]
	max9AVX2(unsafe.SliceData(d), unsafe.SliceData(src), len(d), 4*pix, 4*row)
}

//go:noescape
func max9AVX2(d, src *float32, n, pix, row int)

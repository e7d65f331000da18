//go:build !amd64

package conv

func archKernels() []kernels { return nil }

func archKernel(name string, p, g int, t *tile) { panic("conv: no " + name + " kernels here") }

func max9(d, src []float32, pix, row int) { max9Go(d, src, pix, row) }

func winogradInAsm(dst []float32, stride int, src []float32, row, pix, n int) {
	panic("conv: no Winograd assembly here")
}

func winogradOutAsm(dst []float32, row, pix int, src []float32, stride int, bias, res []float32, relu bool, n int) {
	panic("conv: no Winograd assembly here")
}

func winogradAsm(family string) bool { return false }

func winograd4InAsm(dst []float32, stride int, src []float32, row, pix, n int) {
	panic("conv: no Winograd assembly here")
}

func winograd4OutAsm(dst []float32, row, pix int, src []float32, stride int, bias, res []float32, relu bool, n int) {
	panic("conv: no Winograd assembly here")
}

//go:build !amd64

package conv

func archKernels() []kernels { return nil }

func archKernel(name string, p, g int, t *tile) { panic("conv: no " + name + " kernels here") }

func max9(d, src []float32, pix, row int) { max9Go(d, src, pix, row) }

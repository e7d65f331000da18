package gemm

import "fmt"

// microKernel multiplies an MR-row panel of packed A by an NR-column panel of
// packed B over k and writes the MR x NR tile of C applying flags.
type microKernel struct {
	name   string
	mr, nr int
	// full computes the tile: a holds k*mr values, b k*nr; c has row stride
	// ldc; bias holds mr values when flags has flagBias; res (row stride ldr)
	// is read when flags has flagResidual.
	full func(k int, a, b, c []float32, ldc, flags int, bias, res []float32, ldr int)
}

// generic is the portable kernel.
var generic = microKernel{name: "generic", mr: 6, nr: 16, full: genericFull}

func genericFull(k int, a, b, c []float32, ldc, flags int, bias, res []float32, ldr int) {
	const mr, nr = 6, 16
	var acc [mr * nr]float32
	a = a[:k*mr]
	b = b[:k*nr]
	for p := 0; p < k; p++ {
		ap := a[p*mr : p*mr+mr]
		bp := b[p*nr : p*nr+nr]
		for i, av := range ap {
			row := acc[i*nr : i*nr+nr]
			for j, bv := range bp {
				row[j] += av * bv
			}
		}
	}
	epilogue(acc[:], nr, c, ldc, mr, nr, flags, bias, res, ldr)
}

// kernels lists the supported kernels, fastest first; the last is generic.
func kernels() []microKernel {
	return append(archKernels(), generic)
}

func findKernel(name string) (microKernel, error) {
	ks := kernels()
	if name == "" {
		return ks[0], nil
	}
	for _, k := range ks {
		if k.name == name {
			return k, nil
		}
	}
	return microKernel{}, fmt.Errorf("gemm: kernel %q is not supported here (have %v)", name, Kernels())
}

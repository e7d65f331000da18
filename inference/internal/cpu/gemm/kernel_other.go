//go:build !amd64

package gemm

func archKernels() []microKernel { return nil }

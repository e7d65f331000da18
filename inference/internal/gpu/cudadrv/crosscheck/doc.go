// Package crosscheck holds only a test, which compares the answers of our
// driver table (package cudadrv) with those of gorgonia.org/cu on a machine with
// a GPU: device count, names, memory, compute capability, PCI location and
// driver version.
//
// gorgonia.org/cu links libcuda at build time and calls cuInit in its package
// init, exiting the process when that fails, so a program that links it cannot
// start without an NVIDIA driver. It therefore stays out of every other package
// and this test is built only with the gorgonia tag as well as cuda:
//
//	go test -c -tags 'cuda gorgonia' -o .gpu/crosscheck.test ./inference/internal/gpu/cudadrv/crosscheck
package crosscheck

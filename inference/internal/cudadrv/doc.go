// Package cudadrv holds the few CUDA driver calls that gorgonia.org/cu lacks:
// pinned (page-locked) host memory, and stream capture into CUDA graphs that are
// then replayed with one launch. Streams are passed as raw CUstream pointers
// (gorgonia.org/cu's Stream.C()). Calls need a current CUDA context on the
// calling OS thread. The package is functional only with the cuda build tag on
// linux with cgo.
package cudadrv

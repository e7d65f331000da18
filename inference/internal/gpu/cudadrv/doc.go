// Package cudadrv is the CUDA driver API, or the part of it this module uses,
// loaded at run time: nothing links libcuda, so a program that imports it
// starts on a machine without an NVIDIA driver and finds out at Init.
//
// Use:
//
//  1. Init opens libcuda.so.1 with dlopen (package dl), resolves every function
//     into one table (a missing symbol is an Init error, never a crash later) and
//     calls cuInit, once per process. No package init touches the driver.
//  2. Devices, primary contexts, streams, events, device and pinned host memory,
//     copies, stream capture into CUDA graphs, stream gates and kernels loaded
//     from PTX (LoadModule, Function.Launch) are small typed
//     wrappers; each calls the driver through a static C trampoline, and each
//     CUresult other than success becomes a Result error on the line it is
//     returned.
//  3. Calls other than Init need a current context on the calling OS thread
//     (SetCurrentContext on a locked thread).
//
// The declarations come from the CUDA headers (cuda.h) at build time; the
// symbol names are those the headers map each function to (cuMemAlloc is
// cuMemAlloc_v2). The package is functional only with the cuda build tag on
// linux with cgo; elsewhere Init fails.
package cudadrv

// Package cublas is a minimal binding to NVIDIA cuBLAS (single-precision GEMM),
// loaded at run time with dlopen: Load resolves every function into one table,
// Lib.Create makes a Handle on the current CUDA context, and Handle methods
// enqueue work on the handle's stream. Prototypes and enum values are written
// from cuBLAS's documentation; statuses become Status errors. The package is
// functional only with the cuda build tag on linux with cgo.
package cublas

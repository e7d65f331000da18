// Package cudnn is a minimal binding to NVIDIA cuDNN 9's legacy convolution API,
// loaded at run time with dlopen (no cuDNN headers or libraries at build time).
//
// Use:
//
//  1. Load opens libcudnn.so.9 (or libcudnn.so) and resolves every function this
//     package calls into one table; a missing library or symbol is a load error.
//  2. Lib.Create makes a Handle on the calling thread's current CUDA context;
//     SetStream binds it to a stream.
//  3. Descriptors (tensor, filter, convolution, activation, pooling) describe
//     shapes; they are host objects made once and destroyed with Destroy.
//  4. Handle methods enqueue work on the handle's stream. Device memory is passed
//     as uintptr device addresses.
//
// The prototypes and enum values are written from cuDNN's documentation. Every
// cuDNN status becomes a Status error on the line it is returned. The package is
// functional only with the cuda build tag on linux with cgo.
package cudnn

//go:build cuda && linux && cgo

package cublas

/*
#include <stdint.h>
#include <stddef.h>

typedef int st;
typedef void *hnd;

enum { kCreate, kDestroy, kSetStream, kSetMath, kSgemm, kGetProperty, kSetWorkspace, kCount };

static void *fns[kCount];

static void set_fn(int i, void *p) { fns[i] = p; }
static int fn_count(void) { return kCount; }

#define F(i, ret, ...) ((ret (*)(__VA_ARGS__))fns[i])

static st t_Create(hnd *h) { return F(kCreate, st, hnd *)(h); }
static st t_Destroy(hnd h) { return F(kDestroy, st, hnd)(h); }
static st t_SetStream(hnd h, uintptr_t s) { return F(kSetStream, st, hnd, void *)(h, (void *)s); }
static st t_SetMath(hnd h, int m) { return F(kSetMath, st, hnd, int)(h, m); }
static st t_Sgemm(hnd h, int ta, int tb, int m, int n, int k, float alpha, uintptr_t a, int lda,
		uintptr_t b, int ldb, float beta, uintptr_t c, int ldc) {
	return F(kSgemm, st, hnd, int, int, int, int, int, const float *, const float *, int,
		const float *, int, const float *, float *, int)(
		h, ta, tb, m, n, k, &alpha, (const float *)a, lda, (const float *)b, ldb, &beta, (float *)c, ldc);
}
static st t_GetProperty(int type, int *v) { return F(kGetProperty, st, int, int *)(type, v); }
static st t_SetWorkspace(hnd h, uintptr_t ws, size_t size) {
	return F(kSetWorkspace, st, hnd, void *, size_t)(h, (void *)ws, size);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/inferbench/inferbench/inference/internal/dl"
)

// libraries are the file names Load tries, in order (cuBLAS 13 lives in
// /usr/local/cuda/lib64 on the GPU machine).
var libraries = []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}

// symbols are the functions Load resolves, in the order of the C table.
var symbols = []string{
	"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode", "cublasSgemm_v2",
	"cublasGetProperty", "cublasSetWorkspace_v2",
}

// Lib is the loaded cuBLAS library. It stays loaded for the life of the process.
type Lib struct{ file string }

var (
	loadOnce sync.Once
	loaded   *Lib
	loadErr  error
)

// Load loads cuBLAS once per process and returns it, or the error of the first
// attempt. The error names the library files tried and mentions LD_LIBRARY_PATH.
func Load() (*Lib, error) {
	loadOnce.Do(func() { loaded, loadErr = load() })
	return loaded, loadErr
}

func load() (*Lib, error) {
	if int(C.fn_count()) != len(symbols) {
		return nil, fmt.Errorf("cublas: table has %d entries, symbol list %d", int(C.fn_count()), len(symbols))
	}
	lib, err := dl.Table(libraries, symbols, func(i int, p unsafe.Pointer) { C.set_fn(C.int(i), p) })
	if err != nil {
		return nil, fmt.Errorf("cublas: %w", err)
	}
	return &Lib{file: lib.Name()}, nil
}

func check(s C.st) error {
	if s == 0 {
		return nil
	}
	return Status(s)
}

// File is the library file that was loaded.
func (l *Lib) File() string { return l.file }

// Version returns "major.minor.patch" (cublasGetProperty).
func (l *Lib) Version() (string, error) {
	var v [3]C.int
	for i := range v {
		if err := check(C.t_GetProperty(C.int(i), &v[i])); err != nil {
			return "", fmt.Errorf("cublas: version: %w", err)
		}
	}
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]), nil
}

// Handle is a cuBLAS context bound to the CUDA context current when it was made.
// One goroutine uses a handle at a time.
type Handle struct{ h C.hnd }

// Create makes a handle on the calling thread's current CUDA context.
func (l *Lib) Create() (Handle, error) {
	var h C.hnd
	if err := check(C.t_Create(&h)); err != nil {
		return Handle{}, fmt.Errorf("cublas: create handle: %w", err)
	}
	return Handle{h}, nil
}

// Destroy releases the handle; the zero Handle is ignored.
func (h Handle) Destroy() error {
	if h.h == nil {
		return nil
	}
	return check(C.t_Destroy(h.h))
}

// SetStream makes the handle enqueue its work on stream (a CUstream).
func (h Handle) SetStream(stream unsafe.Pointer) error {
	return check(C.t_SetStream(h.h, C.uintptr_t(uintptr(stream))))
}

// SetMath sets the math mode.
func (h Handle) SetMath(m Math) error { return check(C.t_SetMath(h.h, C.int(m))) }

// SetWorkspace gives the handle size bytes of device memory at ws to use instead
// of allocating its own (needed for stream capture).
func (h Handle) SetWorkspace(ws, size uintptr) error {
	return check(C.t_SetWorkspace(h.h, C.uintptr_t(ws), C.size_t(size)))
}

// Sgemm enqueues C = alpha*op(A)*op(B) + beta*C on column-major float matrices
// (op(A) m x k, op(B) k x n, C m x n; a, b, c are device addresses).
func (h Handle) Sgemm(ta, tb Op, m, n, k int, alpha float32, a uintptr, lda int, b uintptr, ldb int,
	beta float32, c uintptr, ldc int) error {
	return check(C.t_Sgemm(h.h, C.int(ta), C.int(tb), C.int(m), C.int(n), C.int(k), C.float(alpha),
		C.uintptr_t(a), C.int(lda), C.uintptr_t(b), C.int(ldb), C.float(beta), C.uintptr_t(c), C.int(ldc)))
}

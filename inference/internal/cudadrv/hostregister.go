//go:build cuda && linux && cgo

package cudadrv

/*
#include <cuda.h>
#include <stddef.h>

// HOSTREG lists the driver functions of host registration. They are resolved
// with dlsym from libcuda.so.1 on first use, under the symbols cuda.h maps
// their names to (cuMemHostRegister is cuMemHostRegister_v2), so this file
// links nothing and works whether the rest of the package links libcuda or
// loads it.
#define HOSTREG(X) X(cuMemHostRegister) X(cuMemHostUnregister)

#define HR_DECLARE(f) static __typeof__(f) *hr_##f;
HOSTREG(HR_DECLARE)

#define HR_QUOTE(s) #s
#define HR_NAME(f) HR_QUOTE(f),
#define HR_SLOT(f) (void **)&hr_##f,
static const char *hr_names[] = { HOSTREG(HR_NAME) };
static void **hr_slots[] = { HOSTREG(HR_SLOT) };

static int hr_count(void) { return sizeof(hr_names) / sizeof(hr_names[0]); }
static const char *hr_name(int i) { return hr_names[i]; }
static void hr_set(int i, void *p) { *hr_slots[i] = p; }

static CUresult hr_register(void *p, size_t n) {
	return hr_cuMemHostRegister ? hr_cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE) : CUDA_ERROR_NOT_INITIALIZED;
}
static CUresult hr_unregister(void *p) {
	return hr_cuMemHostUnregister ? hr_cuMemHostUnregister(p) : CUDA_ERROR_NOT_INITIALIZED;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/inferbench/inferbench/inference/internal/dl"
)

var (
	hostRegOnce sync.Once
	hostRegErr  error
)

// hostRegisterSymbols are the driver symbols of the host-registration table.
func hostRegisterSymbols() []string {
	names := make([]string, C.hr_count())
	for i := range names {
		names[i] = C.GoString(C.hr_name(C.int(i)))
	}
	return names
}

// loadHostRegister resolves the host-registration functions once. The
// library stays open for the life of the process.
func loadHostRegister() error {
	hostRegOnce.Do(func() {
		_, hostRegErr = dl.Table([]string{"libcuda.so.1"}, hostRegisterSymbols(), func(i int, p unsafe.Pointer) { C.hr_set(C.int(i), p) })
		if hostRegErr != nil {
			hostRegErr = fmt.Errorf("cudadrv: host registration: %w", hostRegErr)
		}
	})
	return hostRegErr
}

// HostRegister page-locks n bytes of host memory at p that the caller
// allocated (a mapping, say), for every CUDA context (portable), so that
// copies from it are DMAs like copies from HostAlloc memory. p and n should
// cover whole pages. Undo it with HostUnregister before the memory is freed.
func HostRegister(p unsafe.Pointer, n int) error {
	if err := loadHostRegister(); err != nil {
		return err
	}
	if err := check(C.hr_register(p, C.size_t(n))); err != nil {
		return fmt.Errorf("cudadrv: page-locking %d bytes of host memory: %w", n, err)
	}
	return nil
}

// HostUnregister undoes HostRegister of the memory starting at p.
func HostUnregister(p unsafe.Pointer) error {
	if err := loadHostRegister(); err != nil {
		return err
	}
	if err := check(C.hr_unregister(p)); err != nil {
		return fmt.Errorf("cudadrv: unregistering page-locked host memory: %w", err)
	}
	return nil
}

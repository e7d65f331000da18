//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/cudadrv"
)

var _ backend.HostRegistrar = (*engine)(nil)

// RegisterHost page-locks p, memory the caller mapped (a client's
// shared-memory region), once, with cuMemHostRegister (portable, so every
// device's context may copy from it). Until unregister is called, CopyIn
// treats parts inside p as it treats AllocHost memory: one asynchronous DMA
// from the caller's memory, no staging copy. unregister is idempotent, and
// does nothing after Close (which unregisters what is left).
func (e *engine) RegisterHost(p []byte) (unregister func() error, err error) {
	if len(p) == 0 {
		return nil, errors.New("cuda: RegisterHost of no memory")
	}
	base := unsafe.Pointer(unsafe.SliceData(p))
	if err := withContext(e.devices[0], func() error { return cudadrv.HostRegister(base, len(p)) }); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	e.hostMu.Lock()
	e.registered = append(e.registered, hostRange{base, uintptr(base), uintptr(base) + uintptr(len(p))})
	e.hostMu.Unlock()
	var once sync.Once
	var uerr error
	return func() error {
		once.Do(func() {
			e.hostMu.Lock()
			i := slices.IndexFunc(e.registered, func(r hostRange) bool { return r.p == base })
			if i < 0 { // Close unregistered it
				e.hostMu.Unlock()
				return
			}
			e.registered = slices.Delete(e.registered, i, i+1)
			e.hostMu.Unlock()
			uerr = withContext(e.devices[0], func() error { return cudadrv.HostUnregister(base) })
			if uerr != nil {
				uerr = fmt.Errorf("cuda: %w", uerr)
			}
		})
		return uerr
	}, nil
}

// registeredHost reports whether [start, end) lies inside memory from
// RegisterHost; the caller holds hostMu.
func (e *engine) registeredHost(start, end uintptr) bool {
	for _, r := range e.registered {
		if start >= r.start && end <= r.end {
			return true
		}
	}
	return false
}

// unregisterAllHost undoes every RegisterHost still in force (for Close,
// while device 0's context is still retained).
func (e *engine) unregisterAllHost() error {
	e.hostMu.Lock()
	left := e.registered
	e.registered = nil
	e.hostMu.Unlock()
	if len(left) == 0 || len(e.devices) == 0 {
		return nil
	}
	return withContext(e.devices[0], func() error {
		var errs []error
		for _, r := range left {
			errs = append(errs, cudadrv.HostUnregister(r.p))
		}
		return errors.Join(errs...)
	})
}

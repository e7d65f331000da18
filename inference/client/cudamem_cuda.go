//go:build cuda && linux && cgo

package client

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
)

// CUDAMemory is GPU memory this process allocated, to share with a server
// as a CUDA shared-memory region: register Handle with
// RegisterCudaSharedMemory on Device, then name the region in requests. The
// server maps the same memory, so inputs written here with Write are read
// there on the GPU, and logits the server writes are read here with Read.
// Keeping concurrent requests' data apart is the caller's business.
//
// The memory lives in the device's primary context, which it retains until
// Close. Its methods are safe for concurrent use.
type CUDAMemory struct {
	device int
	dev    cudadrv.Device
	ctx    cudadrv.Context
	ptr    uintptr
	size   int
	handle [cudadrv.IPCHandleSize]byte

	mu     sync.Mutex
	closed bool
}

// AllocCUDA allocates size bytes of GPU memory on the device with ordinal
// device (zeroed) and gets its CUDA IPC handle. Without a usable GPU its
// error wraps ErrNoCUDA.
func AllocCUDA(device, size int) (*CUDAMemory, error) {
	if size < 1 {
		return nil, fmt.Errorf("client: CUDA memory of %d bytes, want at least 1", size)
	}
	if err := cudadrv.Init(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCUDA, err)
	}
	d, err := cudadrv.GetDevice(device)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCUDA, err)
	}
	ctx, err := d.RetainPrimaryContext()
	if err != nil {
		return nil, fmt.Errorf("client: device %d: %w", device, err)
	}
	m := &CUDAMemory{device: device, dev: d, ctx: ctx, size: size}
	err = m.in(func() error {
		var err error
		if m.ptr, err = cudadrv.MemAlloc(size); err != nil {
			return err
		}
		if err := cudadrv.MemsetD8(m.ptr, 0, size); err != nil {
			return err
		}
		m.handle, err = cudadrv.IPCGetMemHandle(m.ptr)
		return err
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("client: CUDA memory of %d bytes on device %d: %w", size, device, err), m.free())
	}
	return m, nil
}

// in runs f on a locked OS thread with the memory's context current, then
// restores the thread's context.
func (m *CUDAMemory) in(f func() error) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := cudadrv.CurrentContext()
	if err != nil {
		return err
	}
	if err := cudadrv.SetCurrentContext(m.ctx); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cudadrv.SetCurrentContext(prev)) }()
	return f()
}

// Handle is the memory's CUDA IPC handle (cudaIpcMemHandle_t), the
// raw_handle to register.
func (m *CUDAMemory) Handle() []byte { return append([]byte(nil), m.handle[:]...) }

// Device is the ordinal of the GPU the memory is on, the device_id to
// register.
func (m *CUDAMemory) Device() int { return m.device }

// Size is the memory's size in bytes.
func (m *CUDAMemory) Size() int { return m.size }

// Write copies b to the memory at byte offset off and returns when done.
func (m *CUDAMemory) Write(off int, b []byte) error {
	if err := checkRange(off, len(b), m.size); err != nil || len(b) == 0 {
		return err
	}
	return m.use(func() error { return cudadrv.MemcpyHtoD(m.ptr+uintptr(off), unsafe.Pointer(&b[0]), len(b)) })
}

// Read copies len(b) bytes of the memory from byte offset off into b.
func (m *CUDAMemory) Read(off int, b []byte) error {
	if err := checkRange(off, len(b), m.size); err != nil || len(b) == 0 {
		return err
	}
	return m.use(func() error { return cudadrv.MemcpyDtoH(unsafe.Pointer(&b[0]), m.ptr+uintptr(off), len(b)) })
}

// use runs f in the memory's context unless the memory was closed.
func (m *CUDAMemory) use(f func() error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("client: CUDA memory closed")
	}
	if err := m.in(f); err != nil {
		return fmt.Errorf("client: CUDA memory on device %d: %w", m.device, err)
	}
	return nil
}

// Close frees the memory and releases the context. Unregister the region
// from every server first: CUDA leaves undefined what becomes of memory
// freed while another process still maps it. Calling Close again does
// nothing.
func (m *CUDAMemory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.free()
}

func (m *CUDAMemory) free() error {
	var err error
	if m.ptr != 0 {
		err = m.in(func() error { return cudadrv.MemFree(m.ptr) })
		m.ptr = 0
	}
	return errors.Join(err, m.dev.ReleasePrimaryContext())
}

//go:build !(cuda && linux && cgo)

package client

import "fmt"

// CUDAMemory is GPU memory to share with a server as a CUDA shared-memory
// region; this build has no CUDA, and AllocCUDA always fails.
type CUDAMemory struct{}

// AllocCUDA fails with ErrNoCUDA: this build has no CUDA.
func AllocCUDA(device, size int) (*CUDAMemory, error) {
	return nil, fmt.Errorf("%w (device %d, %d bytes)", ErrNoCUDA, device, size)
}

// Handle is nil.
func (m *CUDAMemory) Handle() []byte { return nil }

// Device is 0.
func (m *CUDAMemory) Device() int { return 0 }

// Size is 0.
func (m *CUDAMemory) Size() int { return 0 }

// Write fails with ErrNoCUDA.
func (m *CUDAMemory) Write(off int, b []byte) error { return ErrNoCUDA }

// Read fails with ErrNoCUDA.
func (m *CUDAMemory) Read(off int, b []byte) error { return ErrNoCUDA }

// Close does nothing.
func (m *CUDAMemory) Close() error { return nil }

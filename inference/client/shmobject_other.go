//go:build !linux

package client

import "errors"

// CreateSharedMemory is not implemented on this system: it fails.
func CreateSharedMemory(key string, size int) (*SharedMemoryObject, error) {
	if _, err := checkSharedMemoryKey(key); err != nil {
		return nil, err
	}
	return nil, errors.New("client: creating POSIX shared-memory objects is implemented on Linux only")
}

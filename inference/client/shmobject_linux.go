//go:build linux

package client

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// sharedMemoryDir is where Linux keeps POSIX shared-memory objects.
var sharedMemoryDir = "/dev/shm"

// CreateSharedMemory creates the POSIX shared-memory object key ("/name", as
// shm_open names it: /dev/shm/name on Linux) of size bytes and maps it
// read-write. It fails if the object exists. The object's memory is
// allocated at once (fallocate), so a /dev/shm too small for it is an error
// here rather than a SIGBUS in whichever process first touches a missing
// page.
func CreateSharedMemory(key string, size int) (*SharedMemoryObject, error) {
	name, err := checkSharedMemoryKey(key)
	if err != nil {
		return nil, err
	}
	if size < 1 {
		return nil, fmt.Errorf("client: shared-memory object %q: size %d, want at least 1 byte", key, size)
	}
	path := filepath.Join(sharedMemoryDir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("client: creating shared-memory object %q (%s): %w", key, path, err)
	}
	defer unix.Close(fd) // the mapping keeps the object
	fail := func(op string, err error) (*SharedMemoryObject, error) {
		return nil, errors.Join(fmt.Errorf("client: shared-memory object %q: %s %d bytes: %w", key, op, size, err), unix.Unlink(path))
	}
	if err := unix.Fallocate(fd, 0, 0, int64(size)); err != nil {
		return fail("allocating", err)
	}
	data, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mapping", err)
	}
	return &SharedMemoryObject{key: key, data: data, free: func() error {
		return errors.Join(unix.Munmap(data), unix.Unlink(path))
	}}, nil
}

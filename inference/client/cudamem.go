package client

import (
	"errors"
	"fmt"
)

// ErrNoCUDA is returned by AllocCUDA where there is no CUDA: a build without
// -tags cuda (Linux, cgo), or a machine without an NVIDIA driver and GPU.
var ErrNoCUDA = errors.New("client: no CUDA here (AllocCUDA needs -tags cuda on Linux with cgo, an NVIDIA driver and a GPU)")

// checkRange checks that n bytes at off lie inside size bytes.
func checkRange(off, n, size int) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("client: %d bytes at offset %d do not fit in %d bytes of CUDA memory", n, off, size)
	}
	return nil
}

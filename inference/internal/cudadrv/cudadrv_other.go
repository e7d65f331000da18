//go:build !(cuda && linux && cgo)

package cudadrv

import (
	"errors"
	"unsafe"
)

var errUnsupported = errors.New("cudadrv: not available in this build (needs -tags cuda, linux and cgo)")

// HostAlloc always fails in this build.
func HostAlloc(n int) (unsafe.Pointer, error) { return nil, errUnsupported }

// HostFree always fails in this build.
func HostFree(p unsafe.Pointer) error { return errUnsupported }

func errName(r Result) string { return "" }

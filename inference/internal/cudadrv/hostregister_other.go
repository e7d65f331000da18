//go:build !(cuda && linux && cgo)

package cudadrv

import "unsafe"

// HostRegister always fails in this build.
func HostRegister(p unsafe.Pointer, n int) error { return errUnsupported }

// HostUnregister always fails in this build.
func HostUnregister(p unsafe.Pointer) error { return errUnsupported }

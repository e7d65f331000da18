//go:build !(cuda && linux && cgo)

package dl

import (
	"errors"
	"unsafe"
)

// Lib is an open shared library; this build cannot open any.
type Lib struct{}

var errUnsupported = errors.New("dl: run-time loading needs a linux cgo build with -tags cuda")

// Open always fails in this build.
func Open(names ...string) (*Lib, error) { return nil, errUnsupported }

// Name returns "".
func (l *Lib) Name() string { return "" }

// Sym always fails in this build.
func (l *Lib) Sym(name string) (unsafe.Pointer, error) { return nil, errUnsupported }

// Close does nothing.
func (l *Lib) Close() error { return nil }

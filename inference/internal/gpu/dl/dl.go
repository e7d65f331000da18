//go:build cuda && linux && cgo

package dl

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// Lib is an open shared library. Its methods are safe for concurrent use.
type Lib struct {
	name string

	mu     sync.Mutex
	handle unsafe.Pointer // nil after Close
}

// Open opens the first of names that the dynamic loader finds (the names are
// tried in order, as dlopen resolves them: LD_LIBRARY_PATH, the cache, default
// directories). The error names every file tried and the loader's reason.
func Open(names ...string) (*Lib, error) {
	if len(names) == 0 {
		return nil, errors.New("dl: no library name given")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var reasons []string
	for _, name := range names {
		cname := C.CString(name)
		h := C.dlopen(cname, C.RTLD_NOW|C.RTLD_LOCAL)
		C.free(unsafe.Pointer(cname))
		if h != nil {
			return &Lib{name: name, handle: h}, nil
		}
		reasons = append(reasons, lastError())
	}
	return nil, fmt.Errorf("dl: cannot load %s (set LD_LIBRARY_PATH to the directory that holds it): %s",
		strings.Join(names, " or "), strings.Join(reasons, "; "))
}

// Name is the file name the library was opened under.
func (l *Lib) Name() string { return l.name }

// Sym returns the address of the symbol name, or an error naming the symbol and
// the library when it is missing.
func (l *Lib) Sym(name string) (unsafe.Pointer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle == nil {
		return nil, fmt.Errorf("dl: %s: library closed", l.name)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	C.dlerror() // clear a stale error
	p := C.dlsym(l.handle, cname)
	if p == nil {
		return nil, fmt.Errorf("dl: %s: missing symbol %s: %s", l.name, name, lastError())
	}
	return p, nil
}

// Close unloads the library. Symbols from it must not be used afterwards.
// Close is idempotent.
func (l *Lib) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.handle == nil {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h := l.handle
	l.handle = nil
	if C.dlclose(h) != 0 {
		return fmt.Errorf("dl: closing %s: %s", l.name, lastError())
	}
	return nil
}

// lastError reads dlerror; the caller has locked its OS thread since the
// failing call.
func lastError() string {
	msg := C.dlerror()
	if msg == nil {
		return "unknown error"
	}
	return C.GoString(msg)
}

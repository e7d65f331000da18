// Package fault turns a memory fault at a mapped address into an error.
//
// The server reads and writes memory it does not own: a client's
// shared-memory region, mapped from the client's object. A client that
// shrinks the object (ftruncate) under a registered region takes the pages
// away, and the server's next access to them faults (SIGBUS), which by
// default kills the process. runtime/debug.SetPanicOnFault makes such a
// fault a panic in the goroutine that set it; this package sets it where the
// server touches such memory and turns the panic into an *Error, so the
// request fails and the server goes on.
package fault

import (
	"fmt"
	"runtime/debug"
)

// Error is a memory fault at Addr.
type Error struct {
	Addr uintptr
}

func (e *Error) Error() string {
	return fmt.Sprintf("memory fault at %#x: memory the server was reading or writing went away (a shared-memory region whose object was shrunk under the server?)", e.Addr)
}

// Of returns the fault that the recovered panic value r stands for, or nil
// if r is not a memory fault.
func Of(r any) *Error {
	if a, ok := r.(interface{ Addr() uintptr }); ok {
		if _, isErr := r.(error); isErr {
			return &Error{Addr: a.Addr()}
		}
	}
	return nil
}

// Catch makes a memory fault in the calling goroutine a panic and returns
// the previous setting, for Restore: defer fault.Restore(fault.Catch()).
// Neither allocates.
func Catch() (old bool) { return debug.SetPanicOnFault(true) }

// Restore puts back the setting Catch returned.
func Restore(old bool) { debug.SetPanicOnFault(old) }

// Guard runs f and returns the fault it hit, as an *Error, instead of
// crashing; any other panic goes on.
func Guard(f func()) (err error) {
	defer Restore(Catch())
	defer func() {
		if r := recover(); r != nil {
			if e := Of(r); e != nil {
				err = e
				return
			}
			panic(r)
		}
	}()
	f()
	return nil
}

// Copy copies src into dst (as the built-in copy) under Guard.
func Copy[T any](dst, src []T) error {
	return Guard(func() { copy(dst, src) })
}

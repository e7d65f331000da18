//go:build cuda && linux && cgo

package cudadrv

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdint.h>

static CUresult host_alloc(void **p, size_t n) { return cuMemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE); }
static CUresult begin_capture(uintptr_t s) { return cuStreamBeginCapture((CUstream)s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL); }
static CUresult end_capture(uintptr_t s, CUgraph *g) { return cuStreamEndCapture((CUstream)s, g); }
static CUresult instantiate(CUgraphExec *e, CUgraph g) { return cuGraphInstantiateWithFlags(e, g, 0); }
static CUresult launch(CUgraphExec e, uintptr_t s) { return cuGraphLaunch(e, (CUstream)s); }
static const char *err_name(CUresult r) {
	const char *s = 0;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS) return 0;
	return s;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// errName asks the driver for the name of r ("" if it has none).
func errName(r Result) string {
	if s := C.err_name(C.CUresult(r)); s != nil {
		return C.GoString(s)
	}
	return ""
}

func check(r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return Result(r)
}

// HostAlloc returns n bytes of pinned host memory, usable by every CUDA context
// (portable). Free it with HostFree.
func HostAlloc(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := check(C.host_alloc(&p, C.size_t(n))); err != nil {
		return nil, fmt.Errorf("cudadrv: pinned allocation of %d bytes: %w", n, err)
	}
	return p, nil
}

// HostFree releases memory from HostAlloc.
func HostFree(p unsafe.Pointer) error {
	if err := check(C.cuMemFreeHost(p)); err != nil {
		return fmt.Errorf("cudadrv: free pinned memory: %w", err)
	}
	return nil
}

// BeginCapture starts recording the work enqueued on stream (a CUstream) by the
// calling thread into a graph instead of running it.
func BeginCapture(stream unsafe.Pointer) error {
	if err := check(C.begin_capture(C.uintptr_t(uintptr(stream)))); err != nil {
		return fmt.Errorf("cudadrv: begin capture: %w", err)
	}
	return nil
}

// Graph is a captured CUDA graph.
type Graph struct{ g C.CUgraph }

// EndCapture stops recording on stream and returns the graph.
func EndCapture(stream unsafe.Pointer) (Graph, error) {
	var g C.CUgraph
	if err := check(C.end_capture(C.uintptr_t(uintptr(stream)), &g)); err != nil {
		return Graph{}, fmt.Errorf("cudadrv: end capture: %w", err)
	}
	return Graph{g}, nil
}

// Instantiate turns the graph into an executable graph.
func (g Graph) Instantiate() (Exec, error) {
	var e C.CUgraphExec
	if err := check(C.instantiate(&e, g.g)); err != nil {
		return Exec{}, fmt.Errorf("cudadrv: instantiate graph: %w", err)
	}
	return Exec{e}, nil
}

// Destroy releases the graph; the zero Graph is ignored.
func (g Graph) Destroy() error {
	if g.g == nil {
		return nil
	}
	return check(C.cuGraphDestroy(g.g))
}

// Exec is an executable graph.
type Exec struct{ e C.CUgraphExec }

// Launch enqueues the whole graph on stream.
func (e Exec) Launch(stream unsafe.Pointer) error {
	return check(C.launch(e.e, C.uintptr_t(uintptr(stream))))
}

// Destroy releases the executable graph; the zero Exec is ignored.
func (e Exec) Destroy() error {
	if e.e == nil {
		return nil
	}
	return check(C.cuGraphExecDestroy(e.e))
}

//go:build cuda && linux && cgo

package cudadrv

/*
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// DRIVER lists every driver function this package calls. cuda.h maps many API
// names to versioned symbols (cuMemAlloc is cuMemAlloc_v2); NAME expands the
// macro before quoting it, so each entry is looked up under the symbol a
// program linked against these headers would use. Nothing is linked: the
// symbols are resolved with dlsym from libcuda.so.1 at Init.
#define DRIVER(X) \
	X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) \
	X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem) \
	X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxSynchronize) \
	X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuLaunchHostFunc) \
	X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuEventElapsedTime) \
	X(cuMemAlloc) X(cuMemFree) X(cuMemsetD8) X(cuMemcpyHtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) \
	X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemHostRegister) X(cuMemHostUnregister) \
	X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphUpload) \
	X(cuGraphLaunch) X(cuGraphDestroy) X(cuGraphExecDestroy) \
	X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel) \
	X(cuMemcpyDtoH) X(cuMemcpyDtoDAsync) X(cuMemcpyPeerAsync) X(cuMemGetAddressRange) X(cuPointerGetAttribute) \
	X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle)

// One typed pointer per function (p_cuMemAlloc has cuMemAlloc_v2's type).
#define DECLARE(f) static __typeof__(f) *p_##f;
DRIVER(DECLARE)

#define QUOTE(s) #s
#define NAME(f) QUOTE(f),
#define SLOT(f) (void **)&p_##f,
static const char *names[] = { DRIVER(NAME) };
static void **slots[] = { DRIVER(SLOT) };

static int fn_count(void) { return sizeof(names) / sizeof(names[0]); }
static const char *fn_name(int i) { return names[i]; }
static void set_fn(int i, void *p) { *slots[i] = p; }

// CALL calls f through the table, or fails as the driver does before cuInit
// when the table is not loaded.
#define CALL(f, ...) (p_##f ? p_##f(__VA_ARGS__) : CUDA_ERROR_NOT_INITIALIZED)

static CUresult t_init(void) { return CALL(cuInit, 0); }
static CUresult t_driver_version(int *v) { return CALL(cuDriverGetVersion, v); }
static const char *t_error_name(CUresult r) {
	const char *s = 0;
	if (CALL(cuGetErrorName, r, &s) != CUDA_SUCCESS) return 0;
	return s;
}

static CUresult t_device_count(int *n) { return CALL(cuDeviceGetCount, n); }
static CUresult t_device_get(CUdevice *d, int ordinal) { return CALL(cuDeviceGet, d, ordinal); }
static CUresult t_device_name(char *s, int n, CUdevice d) { return CALL(cuDeviceGetName, s, n, d); }
static CUresult t_device_attribute(int *v, int a, CUdevice d) { return CALL(cuDeviceGetAttribute, v, (CUdevice_attribute)a, d); }
static CUresult t_device_total_mem(size_t *n, CUdevice d) { return CALL(cuDeviceTotalMem, n, d); }

static CUresult t_retain(CUcontext *c, CUdevice d) { return CALL(cuDevicePrimaryCtxRetain, c, d); }
static CUresult t_release(CUdevice d) { return CALL(cuDevicePrimaryCtxRelease, d); }
static CUresult t_ctx_get(CUcontext *c) { return CALL(cuCtxGetCurrent, c); }
static CUresult t_ctx_set(CUcontext c) { return CALL(cuCtxSetCurrent, c); }

static CUresult t_stream_create(CUstream *s) { return CALL(cuStreamCreate, s, CU_STREAM_NON_BLOCKING); }
static CUresult t_stream_destroy(CUstream s) { return CALL(cuStreamDestroy, s); }
static CUresult t_stream_sync(CUstream s) { return CALL(cuStreamSynchronize, s); }
static CUresult t_ctx_sync(void) { return CALL(cuCtxSynchronize); }
static CUresult t_stream_wait(CUstream s, CUevent e) { return CALL(cuStreamWaitEvent, s, e, 0); }

static CUresult t_event_create(CUevent *e) { return CALL(cuEventCreate, e, CU_EVENT_DEFAULT); }
static CUresult t_event_destroy(CUevent e) { return CALL(cuEventDestroy, e); }
static CUresult t_event_record(CUevent e, CUstream s) { return CALL(cuEventRecord, e, s); }
static CUresult t_event_query(CUevent e) { return CALL(cuEventQuery, e); }
static CUresult t_event_sync(CUevent e) { return CALL(cuEventSynchronize, e); }
static CUresult t_event_elapsed(float *ms, CUevent a, CUevent b) { return CALL(cuEventElapsedTime, ms, a, b); }

static CUresult t_mem_alloc(uintptr_t *p, size_t n) {
	CUdeviceptr d = 0;
	CUresult r = CALL(cuMemAlloc, &d, n);
	*p = (uintptr_t)d;
	return r;
}
static CUresult t_mem_free(uintptr_t p) { return CALL(cuMemFree, (CUdeviceptr)p); }
static CUresult t_memset(uintptr_t p, unsigned char v, size_t n) { return CALL(cuMemsetD8, (CUdeviceptr)p, v, n); }
static CUresult t_htod(uintptr_t dst, const void *src, size_t n) { return CALL(cuMemcpyHtoD, (CUdeviceptr)dst, src, n); }
static CUresult t_htod_async(uintptr_t dst, const void *src, size_t n, CUstream s) {
	return CALL(cuMemcpyHtoDAsync, (CUdeviceptr)dst, src, n, s);
}
static CUresult t_dtoh_async(void *dst, uintptr_t src, size_t n, CUstream s) {
	return CALL(cuMemcpyDtoHAsync, dst, (CUdeviceptr)src, n, s);
}
static CUresult t_dtoh(void *dst, uintptr_t src, size_t n) { return CALL(cuMemcpyDtoH, dst, (CUdeviceptr)src, n); }
static CUresult t_dtod_async(uintptr_t dst, uintptr_t src, size_t n, CUstream s) {
	return CALL(cuMemcpyDtoDAsync, (CUdeviceptr)dst, (CUdeviceptr)src, n, s);
}
static CUresult t_peer_async(uintptr_t dst, CUcontext dc, uintptr_t src, CUcontext sc, size_t n, CUstream s) {
	return CALL(cuMemcpyPeerAsync, (CUdeviceptr)dst, dc, (CUdeviceptr)src, sc, n, s);
}
static CUresult t_address_range(uintptr_t *base, size_t *size, uintptr_t p) {
	CUdeviceptr b = 0;
	CUresult r = CALL(cuMemGetAddressRange, &b, size, (CUdeviceptr)p);
	*base = (uintptr_t)b;
	return r;
}
static CUresult t_pointer_ordinal(int *ord, uintptr_t p) {
	return CALL(cuPointerGetAttribute, ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)p);
}
// IPC handles cross as bytes: CUipcMemHandle is a struct of CU_IPC_HANDLE_SIZE chars.
static CUresult t_ipc_get(void *handle, uintptr_t p) {
	CUipcMemHandle h;
	CUresult r = CALL(cuIpcGetMemHandle, &h, (CUdeviceptr)p);
	if (r == CUDA_SUCCESS) memcpy(handle, &h, sizeof h);
	return r;
}
static CUresult t_ipc_open(uintptr_t *p, const void *handle) {
	CUipcMemHandle h;
	CUdeviceptr d = 0;
	memcpy(&h, handle, sizeof h);
	CUresult r = CALL(cuIpcOpenMemHandle, &d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	*p = (uintptr_t)d;
	return r;
}
static CUresult t_ipc_close(uintptr_t p) { return CALL(cuIpcCloseMemHandle, (CUdeviceptr)p); }
static int ipc_handle_size(void) { return (int)sizeof(CUipcMemHandle); }
static CUresult t_host_alloc(void **p, size_t n) { return CALL(cuMemHostAlloc, p, n, CU_MEMHOSTALLOC_PORTABLE); }
static CUresult t_host_free(void *p) { return CALL(cuMemFreeHost, p); }
static CUresult t_host_register(void *p, size_t n) { return CALL(cuMemHostRegister, p, n, CU_MEMHOSTREGISTER_PORTABLE); }
static CUresult t_host_unregister(void *p) { return CALL(cuMemHostUnregister, p); }

static CUresult t_begin_capture(CUstream s) { return CALL(cuStreamBeginCapture, s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL); }
static CUresult t_end_capture(CUstream s, CUgraph *g) { return CALL(cuStreamEndCapture, s, g); }
static CUresult t_instantiate(CUgraphExec *e, CUgraph g) { return CALL(cuGraphInstantiateWithFlags, e, g, 0); }
static CUresult t_graph_upload(CUgraphExec e, CUstream s) { return CALL(cuGraphUpload, e, s); }
static CUresult t_graph_launch(CUgraphExec e, CUstream s) { return CALL(cuGraphLaunch, e, s); }
static CUresult t_graph_destroy(CUgraph g) { return CALL(cuGraphDestroy, g); }
static CUresult t_exec_destroy(CUgraphExec e) { return CALL(cuGraphExecDestroy, e); }

static CUresult t_module_load(CUmodule *m, const void *image) { return CALL(cuModuleLoadData, m, image); }
static CUresult t_module_unload(CUmodule m) { return CALL(cuModuleUnload, m); }
static CUresult t_module_function(CUfunction *f, CUmodule m, const char *name) { return CALL(cuModuleGetFunction, f, m, name); }
// t_launch passes the kernel's parameters as one packed buffer (the extra
// argument's CU_LAUNCH_PARAM_BUFFER_POINTER), laid out as the kernel declares them.
static CUresult t_launch(CUfunction f, unsigned gx, unsigned bx, unsigned shmem, CUstream s, void *params, size_t size) {
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
	return CALL(cuLaunchKernel, f, gx, 1, 1, bx, 1, 1, shmem, s, 0, extra);
}

// A gate is a host function enqueued on a stream that returns only when the
// host opens it (or after limit nanoseconds), so the work enqueued behind it
// starts together. state: 0 closed, 1 opened by the host, 2 given up by the
// host function.
typedef struct { int state; long long limit; } gate_t;

static void CUDA_CB gate_wait(void *arg) {
	gate_t *g = arg;
	struct timespec start, now, nap = {0, 10000};
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		if (__atomic_load_n(&g->state, __ATOMIC_ACQUIRE) == 1) return;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long long waited = (long long)(now.tv_sec - start.tv_sec) * 1000000000LL + (now.tv_nsec - start.tv_nsec);
		if (waited >= g->limit) {
			int closed = 0;
			if (__atomic_compare_exchange_n(&g->state, &closed, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
		}
		nanosleep(&nap, 0);
	}
}

static CUresult t_gate(CUstream s, gate_t *g) { return CALL(cuLaunchHostFunc, s, gate_wait, g); }
static int gate_open(gate_t *g) {
	int closed = 0;
	__atomic_compare_exchange_n(&g->state, &closed, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	return __atomic_load_n(&g->state, __ATOMIC_ACQUIRE);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/inferbench/inferbench/inference/internal/gpu/dl"
)

// libraries are the file names Init tries: the driver's soname only, so that a
// toolkit's link-time stub (libcuda.so) is never taken for a driver.
var libraries = []string{"libcuda.so.1"}

var (
	initOnce sync.Once
	initErr  error
)

// Init loads libcuda.so.1, resolves every driver function this package calls
// and initialises the driver (cuInit), once per process; later calls return the
// first call's error. Every other function needs a successful Init; before it
// they fail with ErrNotInitialized.
func Init() error {
	initOnce.Do(func() {
		if initErr = load(libraries); initErr != nil {
			return
		}
		if err := check(C.t_init()); err != nil {
			initErr = fmt.Errorf("cudadrv: cuInit: %w", err)
		}
	})
	return initErr
}

// load opens the first of names and fills the function table. The table is
// filled only when every symbol resolved, so a failed load leaves it empty.
func load(names []string) error {
	lib, err := dl.Open(names...)
	if err != nil {
		return fmt.Errorf("cudadrv: %w", err)
	}
	ptrs := make([]unsafe.Pointer, C.fn_count())
	for i := range ptrs {
		if ptrs[i], err = lib.Sym(symbolName(i)); err != nil {
			_ = lib.Close()
			return fmt.Errorf("cudadrv: %w", err)
		}
	}
	for i, p := range ptrs {
		C.set_fn(C.int(i), p)
	}
	return nil
}

// symbolName is the driver symbol of table entry i.
func symbolName(i int) string { return C.GoString(C.fn_name(C.int(i))) }

// symbolNames lists the table's symbols in order.
func symbolNames() []string {
	out := make([]string, C.fn_count())
	for i := range out {
		out[i] = symbolName(i)
	}
	return out
}

// errName asks the driver for the name of r ("" if it has none or the table
// is not loaded).
func errName(r Result) string {
	if s := C.t_error_name(C.CUresult(r)); s != nil {
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

// DriverVersion is the CUDA version the driver supports, as 1000*major +
// 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	var v C.int
	if err := check(C.t_driver_version(&v)); err != nil {
		return 0, fmt.Errorf("cudadrv: driver version: %w", err)
	}
	return int(v), nil
}

// DeviceCount is the number of CUDA devices.
func DeviceCount() (int, error) {
	var n C.int
	if err := check(C.t_device_count(&n)); err != nil {
		return 0, fmt.Errorf("cudadrv: device count: %w", err)
	}
	return int(n), nil
}

// Device is a CUDA device.
type Device struct{ d C.CUdevice }

// GetDevice returns the device with the given ordinal.
func GetDevice(ordinal int) (Device, error) {
	var d C.CUdevice
	if err := check(C.t_device_get(&d, C.int(ordinal))); err != nil {
		return Device{}, fmt.Errorf("cudadrv: device %d: %w", ordinal, err)
	}
	return Device{d}, nil
}

// Name is the device's product name ("NVIDIA H200").
func (d Device) Name() (string, error) {
	var buf [256]C.char
	if err := check(C.t_device_name(&buf[0], C.int(len(buf)), d.d)); err != nil {
		return "", fmt.Errorf("cudadrv: device name: %w", err)
	}
	return C.GoString(&buf[0]), nil
}

// TotalMem is the device's memory in bytes.
func (d Device) TotalMem() (int64, error) {
	var n C.size_t
	if err := check(C.t_device_total_mem(&n, d.d)); err != nil {
		return 0, fmt.Errorf("cudadrv: device memory: %w", err)
	}
	return int64(n), nil
}

// Attribute is a device attribute (CUdevice_attribute).
type Attribute int

// The attributes callers read.
const (
	ComputeCapabilityMajor Attribute = C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	ComputeCapabilityMinor Attribute = C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	PCIDomainID            Attribute = C.CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID
	PCIBusID               Attribute = C.CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
	PCIDeviceID            Attribute = C.CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID
)

// Attribute returns the value of attribute a.
func (d Device) Attribute(a Attribute) (int, error) {
	var v C.int
	if err := check(C.t_device_attribute(&v, C.int(a), d.d)); err != nil {
		return 0, fmt.Errorf("cudadrv: device attribute %d: %w", int(a), err)
	}
	return int(v), nil
}

// Context is a CUDA context.
type Context struct{ c C.CUcontext }

// RetainPrimaryContext returns the device's primary context, made if needed.
// Every successful call is undone by ReleasePrimaryContext.
func (d Device) RetainPrimaryContext() (Context, error) {
	var c C.CUcontext
	if err := check(C.t_retain(&c, d.d)); err != nil {
		return Context{}, fmt.Errorf("cudadrv: retain primary context: %w", err)
	}
	return Context{c}, nil
}

// ReleasePrimaryContext undoes one RetainPrimaryContext.
func (d Device) ReleasePrimaryContext() error {
	if err := check(C.t_release(d.d)); err != nil {
		return fmt.Errorf("cudadrv: release primary context: %w", err)
	}
	return nil
}

// CurrentContext is the calling OS thread's current context (the zero Context
// if none).
func CurrentContext() (Context, error) {
	var c C.CUcontext
	if err := check(C.t_ctx_get(&c)); err != nil {
		return Context{}, fmt.Errorf("cudadrv: current context: %w", err)
	}
	return Context{c}, nil
}

// SetCurrentContext makes c current on the calling OS thread (the zero Context
// unbinds the thread).
func SetCurrentContext(c Context) error {
	if err := check(C.t_ctx_set(c.c)); err != nil {
		return fmt.Errorf("cudadrv: set current context: %w", err)
	}
	return nil
}

// Stream is a CUDA stream of the context current when it was made.
type Stream struct{ s C.CUstream }

// NewStream makes a stream that does not synchronise with the legacy default
// stream (CU_STREAM_NON_BLOCKING).
func NewStream() (Stream, error) {
	var s C.CUstream
	if err := check(C.t_stream_create(&s)); err != nil {
		return Stream{}, fmt.Errorf("cudadrv: new stream: %w", err)
	}
	return Stream{s}, nil
}

// Pointer is the raw CUstream, for libraries that take one (cuDNN).
func (s Stream) Pointer() unsafe.Pointer { return unsafe.Pointer(s.s) }

// IsZero reports whether s is the zero Stream (none made).
func (s Stream) IsZero() bool { return s.s == nil }

// Destroy releases the stream once its work is done.
func (s Stream) Destroy() error { return check(C.t_stream_destroy(s.s)) }

// Synchronize blocks until the stream's work is done.
func (s Stream) Synchronize() error { return check(C.t_stream_sync(s.s)) }

// Synchronize waits until the current context has finished all its work,
// the copies that cuMemcpyHtoD from pageable memory may leave in flight
// after it returns among them.
func Synchronize() error { return check(C.t_ctx_sync()) }

// WaitEvent makes the stream's later work wait for e's latest record.
func (s Stream) WaitEvent(e Event) error { return check(C.t_stream_wait(s.s, e.e)) }

// Event is a CUDA event with timing.
type Event struct{ e C.CUevent }

// NewEvent makes an event that records time.
func NewEvent() (Event, error) {
	var e C.CUevent
	if err := check(C.t_event_create(&e)); err != nil {
		return Event{}, fmt.Errorf("cudadrv: new event: %w", err)
	}
	return Event{e}, nil
}

// IsZero reports whether e is the zero Event (none made).
func (e Event) IsZero() bool { return e.e == nil }

// Destroy releases the event.
func (e Event) Destroy() error { return check(C.t_event_destroy(e.e)) }

// Record enqueues the event on s: it completes, and takes its time stamp,
// when the device reaches it in s's order.
func (e Event) Record(s Stream) error { return check(C.t_event_record(e.e, s.s)) }

// Synchronize blocks until the event's latest record completed.
func (e Event) Synchronize() error { return check(C.t_event_sync(e.e)) }

// Done reports whether the event's latest record completed, without waiting.
func (e Event) Done() (bool, error) {
	switch r := C.t_event_query(e.e); r {
	case C.CUDA_SUCCESS:
		return true, nil
	case C.CUDA_ERROR_NOT_READY:
		return false, nil
	default:
		return false, Result(r)
	}
}

// Since is the device time from start's record to e's (negative when e came
// first), with the driver's resolution of about half a microsecond. Both
// events must have completed.
func (e Event) Since(start Event) (time.Duration, error) {
	var ms C.float
	if err := check(C.t_event_elapsed(&ms, start.e, e.e)); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// MemAlloc returns n bytes of device memory in the current context.
func MemAlloc(n int) (uintptr, error) {
	var p C.uintptr_t
	if err := check(C.t_mem_alloc(&p, C.size_t(n))); err != nil {
		return 0, fmt.Errorf("cudadrv: %d bytes of device memory: %w", n, err)
	}
	return uintptr(p), nil
}

// MemFree releases memory from MemAlloc.
func MemFree(p uintptr) error { return check(C.t_mem_free(C.uintptr_t(p))) }

// MemsetD8 sets n bytes at p to v and returns when done.
func MemsetD8(p uintptr, v byte, n int) error {
	return check(C.t_memset(C.uintptr_t(p), C.uchar(v), C.size_t(n)))
}

// MemcpyHtoD copies n bytes from host memory src to device memory dst and
// returns when done.
func MemcpyHtoD(dst uintptr, src unsafe.Pointer, n int) error {
	return check(C.t_htod(C.uintptr_t(dst), src, C.size_t(n)))
}

// MemcpyHtoDAsync enqueues a copy of n bytes from host memory src to device
// memory dst on s. From pinned memory it returns at once; from pageable memory
// it returns once the driver staged src.
func MemcpyHtoDAsync(dst uintptr, src unsafe.Pointer, n int, s Stream) error {
	return check(C.t_htod_async(C.uintptr_t(dst), src, C.size_t(n), s.s))
}

// MemcpyDtoHAsync enqueues a copy of n bytes from device memory src to host
// memory dst on s.
func MemcpyDtoHAsync(dst unsafe.Pointer, src uintptr, n int, s Stream) error {
	return check(C.t_dtoh_async(dst, C.uintptr_t(src), C.size_t(n), s.s))
}

// MemcpyDtoH copies n bytes from device memory src to host memory dst and
// returns when done.
func MemcpyDtoH(dst unsafe.Pointer, src uintptr, n int) error {
	return check(C.t_dtoh(dst, C.uintptr_t(src), C.size_t(n)))
}

// MemcpyDtoDAsync enqueues a copy of n bytes from device memory src to
// device memory dst, both of the current context's device, on s.
func MemcpyDtoDAsync(dst, src uintptr, n int, s Stream) error {
	return check(C.t_dtod_async(C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), s.s))
}

// MemcpyPeerAsync enqueues on s a copy of n bytes from device memory src of
// context srcCtx to device memory dst of context dstCtx (another device's).
func MemcpyPeerAsync(dst uintptr, dstCtx Context, src uintptr, srcCtx Context, n int, s Stream) error {
	return check(C.t_peer_async(C.uintptr_t(dst), dstCtx.c, C.uintptr_t(src), srcCtx.c, C.size_t(n), s.s))
}

// MemAddressRange returns the base address and the size in bytes of the
// allocation that holds device address p.
func MemAddressRange(p uintptr) (base uintptr, size int, err error) {
	var b C.uintptr_t
	var n C.size_t
	if err := check(C.t_address_range(&b, &n, C.uintptr_t(p))); err != nil {
		return 0, 0, fmt.Errorf("cudadrv: address range of %#x: %w", p, err)
	}
	return uintptr(b), int(n), nil
}

// PointerDevice returns the ordinal of the device on which the memory at
// device address p was allocated.
func PointerDevice(p uintptr) (int, error) {
	var ord C.int
	if err := check(C.t_pointer_ordinal(&ord, C.uintptr_t(p))); err != nil {
		return 0, fmt.Errorf("cudadrv: device of %#x: %w", p, err)
	}
	return int(ord), nil
}

// IPCHandleSize is the size of a CUDA IPC memory handle (CU_IPC_HANDLE_SIZE).
const IPCHandleSize = 64

// IPCGetMemHandle returns the handle by which another process can map the
// device allocation whose base address is p (cuIpcGetMemHandle).
func IPCGetMemHandle(p uintptr) ([IPCHandleSize]byte, error) {
	var h [IPCHandleSize]byte
	if int(C.ipc_handle_size()) != IPCHandleSize {
		return h, fmt.Errorf("cudadrv: CUipcMemHandle has %d bytes, want %d", int(C.ipc_handle_size()), IPCHandleSize)
	}
	if err := check(C.t_ipc_get(unsafe.Pointer(&h[0]), C.uintptr_t(p))); err != nil {
		return h, fmt.Errorf("cudadrv: IPC handle of %#x: %w", p, err)
	}
	return h, nil
}

// IPCOpenMemHandle maps into the current context the device allocation of
// another process that handle names (cuIpcOpenMemHandle, enabling peer
// access to the allocation's device as needed) and returns its address here.
// Undo it with IPCCloseMemHandle. The driver refuses a handle this same
// process made.
func IPCOpenMemHandle(handle [IPCHandleSize]byte) (uintptr, error) {
	var p C.uintptr_t
	if err := check(C.t_ipc_open(&p, unsafe.Pointer(&handle[0]))); err != nil {
		return 0, fmt.Errorf("cudadrv: cuIpcOpenMemHandle: %w", err)
	}
	return uintptr(p), nil
}

// IPCCloseMemHandle unmaps memory from IPCOpenMemHandle.
func IPCCloseMemHandle(p uintptr) error {
	if err := check(C.t_ipc_close(C.uintptr_t(p))); err != nil {
		return fmt.Errorf("cudadrv: cuIpcCloseMemHandle: %w", err)
	}
	return nil
}

// HostAlloc returns n bytes of pinned host memory, usable by every CUDA context
// (portable). Free it with HostFree.
func HostAlloc(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := check(C.t_host_alloc(&p, C.size_t(n))); err != nil {
		return nil, fmt.Errorf("cudadrv: pinned allocation of %d bytes: %w", n, err)
	}
	return p, nil
}

// HostFree releases memory from HostAlloc.
func HostFree(p unsafe.Pointer) error {
	if err := check(C.t_host_free(p)); err != nil {
		return fmt.Errorf("cudadrv: free pinned memory: %w", err)
	}
	return nil
}

// HostRegister page-locks n bytes of host memory at p that the caller
// allocated (a mapping, say), for every CUDA context (portable), so that
// copies from it are DMAs like copies from HostAlloc memory. p and n should
// cover whole pages. Undo it with HostUnregister before the memory is freed.
func HostRegister(p unsafe.Pointer, n int) error {
	if err := check(C.t_host_register(p, C.size_t(n))); err != nil {
		return fmt.Errorf("cudadrv: page-locking %d bytes of host memory: %w", n, err)
	}
	return nil
}

// HostUnregister undoes HostRegister of the memory starting at p.
func HostUnregister(p unsafe.Pointer) error {
	if err := check(C.t_host_unregister(p)); err != nil {
		return fmt.Errorf("cudadrv: unregistering page-locked host memory: %w", err)
	}
	return nil
}

// BeginCapture starts recording the work the calling thread enqueues on s into
// a graph instead of running it.
func BeginCapture(s Stream) error {
	if err := check(C.t_begin_capture(s.s)); err != nil {
		return fmt.Errorf("cudadrv: begin capture: %w", err)
	}
	return nil
}

// Graph is a captured CUDA graph.
type Graph struct{ g C.CUgraph }

// EndCapture stops recording on s and returns the graph.
func EndCapture(s Stream) (Graph, error) {
	var g C.CUgraph
	if err := check(C.t_end_capture(s.s, &g)); err != nil {
		return Graph{}, fmt.Errorf("cudadrv: end capture: %w", err)
	}
	return Graph{g}, nil
}

// Instantiate turns the graph into an executable graph.
func (g Graph) Instantiate() (Exec, error) {
	var e C.CUgraphExec
	if err := check(C.t_instantiate(&e, g.g)); err != nil {
		return Exec{}, fmt.Errorf("cudadrv: instantiate graph: %w", err)
	}
	return Exec{e}, nil
}

// Destroy releases the graph; the zero Graph is ignored.
func (g Graph) Destroy() error {
	if g.g == nil {
		return nil
	}
	return check(C.t_graph_destroy(g.g))
}

// Exec is an executable graph.
type Exec struct{ e C.CUgraphExec }

// Upload enqueues on s the upload of the graph's work to the device, which its
// first Launch would otherwise do; nothing runs.
func (e Exec) Upload(s Stream) error { return check(C.t_graph_upload(e.e, s.s)) }

// Launch enqueues the whole graph on s.
func (e Exec) Launch(s Stream) error { return check(C.t_graph_launch(e.e, s.s)) }

// Destroy releases the executable graph; the zero Exec is ignored.
func (e Exec) Destroy() error {
	if e.e == nil {
		return nil
	}
	return check(C.t_exec_destroy(e.e))
}

// ErrGateExpired is returned by Gate.Open when the gate had already let the
// stream go on its own, at its time limit after the stream reached it.
var ErrGateExpired = errors.New("cudadrv: stream gate expired before it was opened")

// Gate holds a stream back: the stream's later work starts only after Open,
// so the device runs it back to back however slowly the host enqueued it. The
// driver runs the hold as a host function on its own thread, which waits for
// Open (at most a time limit, after which the stream goes on and Open reports
// ErrGateExpired). The host must enqueue nothing behind a gate that blocks on
// the stream (a synchronous copy, say) before opening it: such a call waits
// for the limit.
type Gate struct{ g *C.gate_t }

// HoldStream enqueues a closed gate on s with a limit of 5 seconds.
func HoldStream(s Stream) (*Gate, error) { return HoldStreamFor(s, 5*time.Second) }

// HoldStreamFor enqueues a closed gate on s that lets the stream go on by
// itself limit after the stream reached it.
func HoldStreamFor(s Stream, limit time.Duration) (*Gate, error) {
	g := (*C.gate_t)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gate_t{}))))
	if g == nil {
		return nil, errors.New("cudadrv: gate: out of memory")
	}
	g.limit = C.longlong(limit.Nanoseconds())
	if err := check(C.t_gate(s.s, g)); err != nil {
		C.free(unsafe.Pointer(g))
		return nil, fmt.Errorf("cudadrv: gate: %w", err)
	}
	return &Gate{g}, nil
}

// Open lets the stream go on.
func (g *Gate) Open() error {
	if C.gate_open(g.g) != 1 {
		return ErrGateExpired
	}
	return nil
}

// Free releases the gate. Call it after Open, once the stream has passed the
// gate (after synchronising the stream or an event recorded behind it).
func (g *Gate) Free() {
	C.free(unsafe.Pointer(g.g))
	g.g = nil
}

// Module is code loaded into the context current when it was loaded.
type Module struct{ m C.CUmodule }

// LoadModule loads image (PTX text, compiled by the driver for the current
// device, or a cubin) into the current context (cuModuleLoadData).
func LoadModule(image []byte) (Module, error) {
	// The driver reads PTX up to a NUL: hand it a terminated copy in C memory.
	buf := C.CBytes(append(image[:len(image):len(image)], 0))
	defer C.free(buf)
	var m C.CUmodule
	if err := check(C.t_module_load(&m, buf)); err != nil {
		return Module{}, fmt.Errorf("cudadrv: load module: %w", err)
	}
	return Module{m}, nil
}

// IsZero reports whether m is the zero Module.
func (m Module) IsZero() bool { return m.m == nil }

// Unload unloads the module; its functions must not be launched again.
func (m Module) Unload() error { return check(C.t_module_unload(m.m)) }

// Function is a kernel of a loaded module.
type Function struct{ f C.CUfunction }

// Function returns the kernel named name (its extern "C" name).
func (m Module) Function(name string) (Function, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f C.CUfunction
	if err := check(C.t_module_function(&f, m.m, cs)); err != nil {
		return Function{}, fmt.Errorf("cudadrv: kernel %s: %w", name, err)
	}
	return Function{f}, nil
}

// Launch enqueues f on s with a one-dimensional grid of blocks blocks of
// threads threads and shared bytes of dynamic shared memory. params are the
// kernel's parameters packed as it declares them (each at its alignment); the
// driver copies them at the call. A launch on a capturing stream is recorded
// into the graph.
func (f Function) Launch(s Stream, blocks, threads, shared int, params []byte) error {
	if len(params) == 0 {
		return errors.New("cudadrv: launch: no parameters")
	}
	p := C.CBytes(params)
	defer C.free(p)
	return check(C.t_launch(f.f, C.uint(blocks), C.uint(threads), C.uint(shared), s.s, p, C.size_t(len(params))))
}

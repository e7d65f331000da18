//go:build cuda && linux && cgo

package cudnn

/*
#include <stdint.h>
#include <stddef.h>

// Our own prototypes, written from cuDNN's API reference. Opaque handles and
// descriptors are pointers; enums are ints; device memory is a uintptr_t.
typedef int st;
typedef void *hnd;

typedef struct {
	int algo;
	int status;
	float time;
	size_t memory;
	int determinism;
	int mathType;
	int reserved[3];
} perf_t;

enum {
	kGetVersion, kGetErrorString, kCreate, kDestroy, kSetStream,
	kCreateTensor, kSetTensor4d, kDestroyTensor,
	kCreateFilter, kSetFilter4d, kDestroyFilter,
	kCreateConv, kSetConv2d, kSetConvMath, kDestroyConv,
	kCreateAct, kSetAct, kDestroyAct,
	kCreatePool, kSetPool2d, kDestroyPool,
	kFindFwdEx, kGetFwdV7, kFwdWorkspace,
	kConvBiasAct, kConvFwd, kAddTensor, kPoolFwd, kTransform,
	kCount
};

static void *fns[kCount];

static void set_fn(int i, void *p) { fns[i] = p; }
static int fn_count(void) { return kCount; }

#define F(i, ret, ...) ((ret (*)(__VA_ARGS__))fns[i])

static size_t t_GetVersion(void) { return F(kGetVersion, size_t, void)(); }
static const char *t_GetErrorString(st s) { return F(kGetErrorString, const char *, st)(s); }
static st t_Create(hnd *h) { return F(kCreate, st, hnd *)(h); }
static st t_Destroy(hnd h) { return F(kDestroy, st, hnd)(h); }
static st t_SetStream(hnd h, uintptr_t s) { return F(kSetStream, st, hnd, void *)(h, (void *)s); }

static st t_CreateTensor(hnd *d) { return F(kCreateTensor, st, hnd *)(d); }
static st t_SetTensor4d(hnd d, int format, int dt, int n, int c, int h, int w) {
	return F(kSetTensor4d, st, hnd, int, int, int, int, int, int)(d, format, dt, n, c, h, w);
}
static st t_DestroyTensor(hnd d) { return F(kDestroyTensor, st, hnd)(d); }

static st t_CreateFilter(hnd *d) { return F(kCreateFilter, st, hnd *)(d); }
static st t_SetFilter4d(hnd d, int dt, int format, int k, int c, int h, int w) {
	return F(kSetFilter4d, st, hnd, int, int, int, int, int, int)(d, dt, format, k, c, h, w);
}
static st t_DestroyFilter(hnd d) { return F(kDestroyFilter, st, hnd)(d); }

static st t_CreateConv(hnd *d) { return F(kCreateConv, st, hnd *)(d); }
static st t_SetConv2d(hnd d, int ph, int pw, int sh, int sw, int dh, int dw, int mode, int dt) {
	return F(kSetConv2d, st, hnd, int, int, int, int, int, int, int, int)(d, ph, pw, sh, sw, dh, dw, mode, dt);
}
static st t_SetConvMath(hnd d, int m) { return F(kSetConvMath, st, hnd, int)(d, m); }
static st t_DestroyConv(hnd d) { return F(kDestroyConv, st, hnd)(d); }

static st t_CreateAct(hnd *d) { return F(kCreateAct, st, hnd *)(d); }
static st t_SetAct(hnd d, int mode, int nan, double coef) {
	return F(kSetAct, st, hnd, int, int, double)(d, mode, nan, coef);
}
static st t_DestroyAct(hnd d) { return F(kDestroyAct, st, hnd)(d); }

static st t_CreatePool(hnd *d) { return F(kCreatePool, st, hnd *)(d); }
static st t_SetPool2d(hnd d, int mode, int nan, int wh, int ww, int ph, int pw, int sh, int sw) {
	return F(kSetPool2d, st, hnd, int, int, int, int, int, int, int, int)(d, mode, nan, wh, ww, ph, pw, sh, sw);
}
static st t_DestroyPool(hnd d) { return F(kDestroyPool, st, hnd)(d); }

static st t_FindFwdEx(hnd h, hnd xd, uintptr_t x, hnd wd, uintptr_t w, hnd cd, hnd yd, uintptr_t y,
		int req, int *ret, perf_t *perf, uintptr_t ws, size_t wsSize) {
	return F(kFindFwdEx, st, hnd, hnd, const void *, hnd, const void *, hnd, hnd, void *, int, int *, perf_t *, void *, size_t)(
		h, xd, (const void *)x, wd, (const void *)w, cd, yd, (void *)y, req, ret, perf, (void *)ws, wsSize);
}
static st t_GetFwdV7(hnd h, hnd xd, hnd wd, hnd cd, hnd yd, int req, int *ret, perf_t *perf) {
	return F(kGetFwdV7, st, hnd, hnd, hnd, hnd, hnd, int, int *, perf_t *)(h, xd, wd, cd, yd, req, ret, perf);
}
static st t_FwdWorkspace(hnd h, hnd xd, hnd wd, hnd cd, hnd yd, int algo, size_t *size) {
	return F(kFwdWorkspace, st, hnd, hnd, hnd, hnd, hnd, int, size_t *)(h, xd, wd, cd, yd, algo, size);
}

static st t_ConvBiasAct(hnd h, float alpha1, hnd xd, uintptr_t x, hnd wd, uintptr_t w, hnd cd, int algo,
		uintptr_t ws, size_t wsSize, float alpha2, hnd zd, uintptr_t z, hnd bd, uintptr_t b,
		hnd ad, hnd yd, uintptr_t y) {
	return F(kConvBiasAct, st, hnd, const void *, hnd, const void *, hnd, const void *, hnd, int,
		void *, size_t, const void *, hnd, const void *, hnd, const void *, hnd, hnd, void *)(
		h, &alpha1, xd, (const void *)x, wd, (const void *)w, cd, algo, (void *)ws, wsSize,
		&alpha2, zd, (const void *)z, bd, (const void *)b, ad, yd, (void *)y);
}
static st t_ConvFwd(hnd h, float alpha, hnd xd, uintptr_t x, hnd wd, uintptr_t w, hnd cd, int algo,
		uintptr_t ws, size_t wsSize, float beta, hnd yd, uintptr_t y) {
	return F(kConvFwd, st, hnd, const void *, hnd, const void *, hnd, const void *, hnd, int,
		void *, size_t, const void *, hnd, void *)(
		h, &alpha, xd, (const void *)x, wd, (const void *)w, cd, algo, (void *)ws, wsSize, &beta, yd, (void *)y);
}
static st t_AddTensor(hnd h, float alpha, hnd ad, uintptr_t a, float beta, hnd cd, uintptr_t c) {
	return F(kAddTensor, st, hnd, const void *, hnd, const void *, const void *, hnd, void *)(
		h, &alpha, ad, (const void *)a, &beta, cd, (void *)c);
}
static st t_PoolFwd(hnd h, hnd pd, float alpha, hnd xd, uintptr_t x, float beta, hnd yd, uintptr_t y) {
	return F(kPoolFwd, st, hnd, hnd, const void *, hnd, const void *, const void *, hnd, void *)(
		h, pd, &alpha, xd, (const void *)x, &beta, yd, (void *)y);
}
static st t_Transform(hnd h, float alpha, hnd xd, uintptr_t x, float beta, hnd yd, uintptr_t y) {
	return F(kTransform, st, hnd, const void *, hnd, const void *, const void *, hnd, void *)(
		h, &alpha, xd, (const void *)x, &beta, yd, (void *)y);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/inferbench/inferbench/inference/internal/gpu/dl"
)

// libraries are the file names Load tries, in order.
var libraries = []string{"libcudnn.so.9", "libcudnn.so"}

// symbols are the functions Load resolves, in the order of the C table.
var symbols = []string{
	"cudnnGetVersion", "cudnnGetErrorString", "cudnnCreate", "cudnnDestroy", "cudnnSetStream",
	"cudnnCreateTensorDescriptor", "cudnnSetTensor4dDescriptor", "cudnnDestroyTensorDescriptor",
	"cudnnCreateFilterDescriptor", "cudnnSetFilter4dDescriptor", "cudnnDestroyFilterDescriptor",
	"cudnnCreateConvolutionDescriptor", "cudnnSetConvolution2dDescriptor", "cudnnSetConvolutionMathType",
	"cudnnDestroyConvolutionDescriptor",
	"cudnnCreateActivationDescriptor", "cudnnSetActivationDescriptor", "cudnnDestroyActivationDescriptor",
	"cudnnCreatePoolingDescriptor", "cudnnSetPooling2dDescriptor", "cudnnDestroyPoolingDescriptor",
	"cudnnFindConvolutionForwardAlgorithmEx", "cudnnGetConvolutionForwardAlgorithm_v7",
	"cudnnGetConvolutionForwardWorkspaceSize",
	"cudnnConvolutionBiasActivationForward", "cudnnConvolutionForward", "cudnnAddTensor",
	"cudnnPoolingForward", "cudnnTransformTensor",
}

// parts are the libraries of cuDNN 9 that libcudnn.so.9 loads itself, on
// first use of the API they hold (Preload).
var parts = []string{"libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9",
	"libcudnn_heuristic.so.9", "libcudnn_engines_precompiled.so.9"}

var (
	preloadOnce sync.Once
	preloaded   []*dl.Lib // kept open for the life of the process
)

// Preload loads the parts of cuDNN that libcudnn.so.9 would load on the first
// call that needs them (a convolution's, say), so that a caller can pay for
// loading them while it waits for something else, such as the driver. It is
// best effort: a part that does not load is left to cuDNN. Only the first call
// loads; it is safe for concurrent use.
func (l *Lib) Preload() {
	preloadOnce.Do(func() {
		for _, name := range parts {
			if lib, err := dl.Open(name); err == nil {
				preloaded = append(preloaded, lib)
			}
		}
	})
}

// Lib is the loaded cuDNN library. It stays loaded for the life of the process.
type Lib struct {
	file string
}

var (
	loadOnce sync.Once
	loaded   *Lib
	loadErr  error
)

// Load loads cuDNN once per process and returns it, or the error of the first
// attempt. The error names the library files tried and mentions LD_LIBRARY_PATH.
func Load() (*Lib, error) {
	loadOnce.Do(func() { loaded, loadErr = load() })
	return loaded, loadErr
}

func load() (*Lib, error) {
	if int(C.fn_count()) != len(symbols) {
		return nil, fmt.Errorf("cudnn: table has %d entries, symbol list %d", int(C.fn_count()), len(symbols))
	}
	lib, err := dl.Table(libraries, symbols, func(i int, p unsafe.Pointer) { C.set_fn(C.int(i), p) })
	if err != nil {
		return nil, fmt.Errorf("cudnn: %w", err)
	}
	describe = func(s Status) string { return C.GoString(C.t_GetErrorString(C.st(s))) }
	return &Lib{file: lib.Name()}, nil
}

// File is the library file that was loaded.
func (l *Lib) File() string { return l.file }

// Version is cudnnGetVersion: major*10000 + minor*100 + patch for cuDNN 9.
func (l *Lib) Version() int { return int(C.t_GetVersion()) }

// VersionString formats Version as "9.14.0".
func (l *Lib) VersionString() string {
	v := l.Version()
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}

func check(s C.st) error {
	if s == 0 {
		return nil
	}
	return Status(s)
}

// Handle is a cuDNN context bound to the CUDA context that was current when it
// was made. One goroutine uses a handle at a time.
type Handle struct{ h C.hnd }

// Create makes a handle on the calling thread's current CUDA context.
func (l *Lib) Create() (Handle, error) {
	var h C.hnd
	if err := check(C.t_Create(&h)); err != nil {
		return Handle{}, fmt.Errorf("cudnn: create handle: %w", err)
	}
	return Handle{h}, nil
}

// Destroy releases the handle; the zero Handle is ignored.
func (h Handle) Destroy() error {
	if h.h == nil {
		return nil
	}
	return check(C.t_Destroy(h.h))
}

// SetStream makes the handle enqueue its work on stream (a CUstream).
func (h Handle) SetStream(stream unsafe.Pointer) error {
	return check(C.t_SetStream(h.h, C.uintptr_t(uintptr(stream))))
}

// TensorDesc describes a 4-d tensor.
type TensorDesc struct{ d C.hnd }

// NewTensor4d describes an n x c x h x w tensor of type dt stored in format.
func (l *Lib) NewTensor4d(format Format, dt DataType, n, c, h, w int) (TensorDesc, error) {
	var d C.hnd
	if err := check(C.t_CreateTensor(&d)); err != nil {
		return TensorDesc{}, err
	}
	if err := check(C.t_SetTensor4d(d, C.int(format), C.int(dt), C.int(n), C.int(c), C.int(h), C.int(w))); err != nil {
		C.t_DestroyTensor(d)
		return TensorDesc{}, fmt.Errorf("cudnn: tensor %dx%dx%dx%d: %w", n, c, h, w, err)
	}
	return TensorDesc{d}, nil
}

// Destroy releases the descriptor; the zero value is ignored.
func (d TensorDesc) Destroy() {
	if d.d != nil {
		C.t_DestroyTensor(d.d)
	}
}

// FilterDesc describes convolution weights.
type FilterDesc struct{ d C.hnd }

// NewFilter4d describes k output x c input channels of h x w weights.
func (l *Lib) NewFilter4d(dt DataType, format Format, k, c, h, w int) (FilterDesc, error) {
	var d C.hnd
	if err := check(C.t_CreateFilter(&d)); err != nil {
		return FilterDesc{}, err
	}
	if err := check(C.t_SetFilter4d(d, C.int(dt), C.int(format), C.int(k), C.int(c), C.int(h), C.int(w))); err != nil {
		C.t_DestroyFilter(d)
		return FilterDesc{}, fmt.Errorf("cudnn: filter %dx%dx%dx%d: %w", k, c, h, w, err)
	}
	return FilterDesc{d}, nil
}

// Destroy releases the descriptor; the zero value is ignored.
func (d FilterDesc) Destroy() {
	if d.d != nil {
		C.t_DestroyFilter(d.d)
	}
}

// ConvDesc describes a 2-d convolution.
type ConvDesc struct{ d C.hnd }

// NewConv2d describes a convolution with the given padding and stride, no
// dilation, computing in dt with math type m.
func (l *Lib) NewConv2d(pad, stride int, mode ConvMode, dt DataType, m MathType) (ConvDesc, error) {
	var d C.hnd
	if err := check(C.t_CreateConv(&d)); err != nil {
		return ConvDesc{}, err
	}
	err := check(C.t_SetConv2d(d, C.int(pad), C.int(pad), C.int(stride), C.int(stride), 1, 1, C.int(mode), C.int(dt)))
	if err == nil {
		err = check(C.t_SetConvMath(d, C.int(m)))
	}
	if err != nil {
		C.t_DestroyConv(d)
		return ConvDesc{}, fmt.Errorf("cudnn: convolution pad %d stride %d: %w", pad, stride, err)
	}
	return ConvDesc{d}, nil
}

// SetMathType changes the math type.
func (d ConvDesc) SetMathType(m MathType) error { return check(C.t_SetConvMath(d.d, C.int(m))) }

// Destroy releases the descriptor; the zero value is ignored.
func (d ConvDesc) Destroy() {
	if d.d != nil {
		C.t_DestroyConv(d.d)
	}
}

// ActivationDesc describes an activation function.
type ActivationDesc struct{ d C.hnd }

// NewActivation describes activation mode with NaN handling nan.
func (l *Lib) NewActivation(mode ActivationMode, nan NanPropagation) (ActivationDesc, error) {
	var d C.hnd
	if err := check(C.t_CreateAct(&d)); err != nil {
		return ActivationDesc{}, err
	}
	if err := check(C.t_SetAct(d, C.int(mode), C.int(nan), 0)); err != nil {
		C.t_DestroyAct(d)
		return ActivationDesc{}, fmt.Errorf("cudnn: activation %d: %w", mode, err)
	}
	return ActivationDesc{d}, nil
}

// Destroy releases the descriptor; the zero value is ignored.
func (d ActivationDesc) Destroy() {
	if d.d != nil {
		C.t_DestroyAct(d.d)
	}
}

// PoolingDesc describes 2-d pooling.
type PoolingDesc struct{ d C.hnd }

// NewPooling2d describes pooling with a wh x ww window, padding ph, pw and
// strides sh, sw.
func (l *Lib) NewPooling2d(mode PoolingMode, wh, ww, ph, pw, sh, sw int) (PoolingDesc, error) {
	var d C.hnd
	if err := check(C.t_CreatePool(&d)); err != nil {
		return PoolingDesc{}, err
	}
	if err := check(C.t_SetPool2d(d, C.int(mode), C.int(NotPropagateNaN), C.int(wh), C.int(ww), C.int(ph), C.int(pw), C.int(sh), C.int(sw))); err != nil {
		C.t_DestroyPool(d)
		return PoolingDesc{}, fmt.Errorf("cudnn: pooling %dx%d: %w", wh, ww, err)
	}
	return PoolingDesc{d}, nil
}

// Destroy releases the descriptor; the zero value is ignored.
func (d PoolingDesc) Destroy() {
	if d.d != nil {
		C.t_DestroyPool(d.d)
	}
}

func perfs(p []C.perf_t) []AlgoPerf {
	out := make([]AlgoPerf, len(p))
	for i, r := range p {
		out[i] = AlgoPerf{Algo: ConvFwdAlgo(r.algo), Err: check(C.st(r.status)), Time: float32(r.time),
			Memory: uintptr(r.memory), MathType: MathType(r.mathType)}
	}
	return out
}

// FindConvForward runs the forward algorithms on real buffers (x, w, y: device
// addresses; y is overwritten) with up to wsSize bytes of workspace at ws, and
// returns the results fastest first (cudnnFindConvolutionForwardAlgorithmEx).
func (h Handle) FindConvForward(xd TensorDesc, x uintptr, wd FilterDesc, w uintptr, cd ConvDesc,
	yd TensorDesc, y uintptr, ws, wsSize uintptr) ([]AlgoPerf, error) {
	var p [algoCount]C.perf_t
	var n C.int
	if err := check(C.t_FindFwdEx(h.h, xd.d, C.uintptr_t(x), wd.d, C.uintptr_t(w), cd.d, yd.d, C.uintptr_t(y),
		algoCount, &n, &p[0], C.uintptr_t(ws), C.size_t(wsSize))); err != nil {
		return nil, fmt.Errorf("cudnn: find forward algorithm: %w", err)
	}
	return perfs(p[:n]), nil
}

// ConvForwardHeuristics returns cuDNN's ranking of the forward algorithms
// without running them (cudnnGetConvolutionForwardAlgorithm_v7).
func (h Handle) ConvForwardHeuristics(xd TensorDesc, wd FilterDesc, cd ConvDesc, yd TensorDesc) ([]AlgoPerf, error) {
	var p [algoCount]C.perf_t
	var n C.int
	if err := check(C.t_GetFwdV7(h.h, xd.d, wd.d, cd.d, yd.d, algoCount, &n, &p[0])); err != nil {
		return nil, fmt.Errorf("cudnn: forward algorithm heuristics: %w", err)
	}
	return perfs(p[:n]), nil
}

// ConvForwardWorkspace is the workspace in bytes algo needs.
func (h Handle) ConvForwardWorkspace(xd TensorDesc, wd FilterDesc, cd ConvDesc, yd TensorDesc, algo ConvFwdAlgo) (uintptr, error) {
	var n C.size_t
	if err := check(C.t_FwdWorkspace(h.h, xd.d, wd.d, cd.d, yd.d, C.int(algo), &n)); err != nil {
		return 0, fmt.Errorf("cudnn: forward workspace size: %w", err)
	}
	return uintptr(n), nil
}

// ConvBiasActivation enqueues y = act(alpha1*conv(x, w) + alpha2*z + bias)
// (cudnnConvolutionBiasActivationForward). ActivationIdentity requires
// AlgoImplicitPrecompGEMM.
func (h Handle) ConvBiasActivation(alpha1 float32, xd TensorDesc, x uintptr, wd FilterDesc, w uintptr,
	cd ConvDesc, algo ConvFwdAlgo, ws, wsSize uintptr, alpha2 float32, zd TensorDesc, z uintptr,
	bd TensorDesc, b uintptr, ad ActivationDesc, yd TensorDesc, y uintptr) error {
	return check(C.t_ConvBiasAct(h.h, C.float(alpha1), xd.d, C.uintptr_t(x), wd.d, C.uintptr_t(w), cd.d, C.int(algo),
		C.uintptr_t(ws), C.size_t(wsSize), C.float(alpha2), zd.d, C.uintptr_t(z), bd.d, C.uintptr_t(b),
		ad.d, yd.d, C.uintptr_t(y)))
}

// ConvForward enqueues y = alpha*conv(x, w) + beta*y (cudnnConvolutionForward).
func (h Handle) ConvForward(alpha float32, xd TensorDesc, x uintptr, wd FilterDesc, w uintptr,
	cd ConvDesc, algo ConvFwdAlgo, ws, wsSize uintptr, beta float32, yd TensorDesc, y uintptr) error {
	return check(C.t_ConvFwd(h.h, C.float(alpha), xd.d, C.uintptr_t(x), wd.d, C.uintptr_t(w), cd.d, C.int(algo),
		C.uintptr_t(ws), C.size_t(wsSize), C.float(beta), yd.d, C.uintptr_t(y)))
}

// AddTensor enqueues c = alpha*a + beta*c, broadcasting a over c's dimensions
// of size 1 in a (cudnnAddTensor).
func (h Handle) AddTensor(alpha float32, ad TensorDesc, a uintptr, beta float32, cd TensorDesc, c uintptr) error {
	return check(C.t_AddTensor(h.h, C.float(alpha), ad.d, C.uintptr_t(a), C.float(beta), cd.d, C.uintptr_t(c)))
}

// Pool enqueues y = alpha*pool(x) + beta*y (cudnnPoolingForward).
func (h Handle) Pool(pd PoolingDesc, alpha float32, xd TensorDesc, x uintptr, beta float32, yd TensorDesc, y uintptr) error {
	return check(C.t_PoolFwd(h.h, pd.d, C.float(alpha), xd.d, C.uintptr_t(x), C.float(beta), yd.d, C.uintptr_t(y)))
}

// Transform enqueues y = alpha*x + beta*y where x and y may differ in layout and
// type (cudnnTransformTensor).
func (h Handle) Transform(alpha float32, xd TensorDesc, x uintptr, beta float32, yd TensorDesc, y uintptr) error {
	return check(C.t_Transform(h.h, C.float(alpha), xd.d, C.uintptr_t(x), C.float(beta), yd.d, C.uintptr_t(y)))
}

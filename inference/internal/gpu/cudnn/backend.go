//go:build cuda && linux && cgo

package cudnn

/*
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdlib.h>

// Our own prototypes of cuDNN 9's backend ("graph") API, written from its API
// reference. Descriptors are opaque pointers; enums are ints; counts int64_t.
typedef int st;
typedef void *hnd;

enum {
	bCreate, bDestroy, bSetAttr, bGetAttr, bFinalize, bExecute,
	bCount
};

static void *bfns[bCount];

static void bset_fn(int i, void *p) { bfns[i] = p; }
static int bfn_count(void) { return bCount; }

#define B(i, ret, ...) ((ret (*)(__VA_ARGS__))bfns[i])

static st b_Create(int type, hnd *d) { return B(bCreate, st, int, hnd *)(type, d); }
static st b_Destroy(hnd d) { return B(bDestroy, st, hnd)(d); }
static st b_SetAttr(hnd d, int name, int type, int64_t n, const void *v) {
	return B(bSetAttr, st, hnd, int, int, int64_t, const void *)(d, name, type, n, v);
}
static st b_GetAttr(hnd d, int name, int type, int64_t want, int64_t *got, void *v) {
	return B(bGetAttr, st, hnd, int, int, int64_t, int64_t *, void *)(d, name, type, want, got, v);
}
static st b_Finalize(hnd d) { return B(bFinalize, st, hnd)(d); }
static st b_Execute(hnd h, hnd plan, hnd pack) { return B(bExecute, st, hnd, hnd, hnd)(h, plan, pack); }

// The setters below take Go values by value, so that no Go pointer is passed.
static st b_SetI64(hnd d, int name, int type, int64_t v) { return b_SetAttr(d, name, type, 1, &v); }
static st b_SetI32(hnd d, int name, int type, int32_t v) { return b_SetAttr(d, name, type, 1, &v); }
static st b_SetF32(hnd d, int name, float v) { return b_SetAttr(d, name, 4, 1, &v); }
static st b_SetBool(hnd d, int name, bool v) { return b_SetAttr(d, name, 2, 1, &v); }
static st b_SetPtr(hnd d, int name, int type, uintptr_t v) { void *p = (void *)v; return b_SetAttr(d, name, type, 1, &p); }
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/inferbench/inferbench/inference/internal/gpu/dl"
)

// backendSymbols are the backend API functions, in the order of the C table.
var backendSymbols = []string{
	"cudnnBackendCreateDescriptor", "cudnnBackendDestroyDescriptor", "cudnnBackendSetAttribute",
	"cudnnBackendGetAttribute", "cudnnBackendFinalize", "cudnnBackendExecute",
}

var (
	backendOnce sync.Once
	backendErr  error
)

// loadBackend resolves the backend API once; cuDNN 8 and later have it.
func (l *Lib) loadBackend() error {
	backendOnce.Do(func() {
		if int(C.bfn_count()) != len(backendSymbols) {
			backendErr = fmt.Errorf("cudnn: backend table has %d entries, symbol list %d", int(C.bfn_count()), len(backendSymbols))
			return
		}
		_, err := dl.Table(libraries, backendSymbols, func(i int, p unsafe.Pointer) { C.bset_fn(C.int(i), p) })
		if err != nil {
			backendErr = fmt.Errorf("cudnn: backend API: %w", err)
		}
	})
	return backendErr
}

// DescType is cudnnBackendDescriptorType_t.
type DescType int

// Backend descriptor types used here.
const (
	DescPointwise      DescType = 0
	DescConvolution    DescType = 1
	DescEngine         DescType = 2
	DescEngineCfg      DescType = 3
	DescEngineHeur     DescType = 4
	DescExecutionPlan  DescType = 5
	DescOpConvForward  DescType = 10
	DescOpPointwise    DescType = 13
	DescOperationGraph DescType = 15
	DescVariantPack    DescType = 16
	DescTensor         DescType = 17
)

// Attr is cudnnBackendAttributeName_t.
type Attr int

// Backend attributes used here.
const (
	AttrPointwiseMode       Attr = 0
	AttrPointwiseMathPrec   Attr = 1
	AttrConvCompType        Attr = 100
	AttrConvMode            Attr = 101
	AttrConvDilations       Attr = 102
	AttrConvFilterStrides   Attr = 103
	AttrConvPostPaddings    Attr = 104
	AttrConvPrePaddings     Attr = 105
	AttrConvSpatialDims     Attr = 106
	AttrHeurMode            Attr = 200
	AttrHeurOperationGraph  Attr = 201
	AttrHeurResults         Attr = 202
	AttrEngineCfgEngine     Attr = 300
	AttrPlanHandle          Attr = 400
	AttrPlanEngineConfig    Attr = 401
	AttrPlanWorkspaceSize   Attr = 402
	AttrConvFwdAlpha        Attr = 700
	AttrConvFwdBeta         Attr = 701
	AttrConvFwdConvDesc     Attr = 702
	AttrConvFwdW            Attr = 703
	AttrConvFwdX            Attr = 704
	AttrConvFwdY            Attr = 705
	AttrPointwiseOpDesc     Attr = 750
	AttrPointwiseOpX        Attr = 751
	AttrPointwiseOpB        Attr = 752
	AttrPointwiseOpY        Attr = 753
	AttrGraphHandle         Attr = 800
	AttrGraphOps            Attr = 801
	AttrTensorByteAlignment Attr = 900
	AttrTensorDataType      Attr = 901
	AttrTensorDimensions    Attr = 902
	AttrTensorStrides       Attr = 903
	AttrTensorUniqueID      Attr = 906
	AttrTensorIsVirtual     Attr = 907
	AttrPackUniqueIDs       Attr = 1000
	AttrPackDataPointers    Attr = 1001
	AttrPackWorkspace       Attr = 1003
	AttrEngineGlobalIndex   Attr = 1301
	AttrEngineNumericalNote Attr = 1303
	AttrEngineBehaviorNote  Attr = 1305
)

// AttrType is cudnnBackendAttributeType_t.
type AttrType int

// Attribute value types used here.
const (
	TypeHandle        AttrType = 0
	TypeDataType      AttrType = 1
	TypeBoolean       AttrType = 2
	TypeInt64         AttrType = 3
	TypeFloat         AttrType = 4
	TypeVoidPtr       AttrType = 6
	TypeConvMode      AttrType = 7
	TypeHeurMode      AttrType = 8
	TypeNumericalNote AttrType = 11
	TypePointwiseMode AttrType = 14
	TypeDescriptor    AttrType = 15
	TypeBehaviorNote  AttrType = 19
)

// HeurMode is cudnnBackendHeurMode_t.
type HeurMode int

// Heuristic modes.
const (
	HeurInstant  HeurMode = 0
	HeurB        HeurMode = 1
	HeurFallback HeurMode = 2
	HeurA        HeurMode = 3
)

// PointwiseMode is cudnnPointwiseMode_t.
type PointwiseMode int

// Pointwise operations used here.
const (
	PointwiseAdd  PointwiseMode = 0
	PointwiseReLU PointwiseMode = 100
)

// NumericalNote is cudnnBackendNumericalNote_t.
type NumericalNote int

// Numerical notes an engine may carry.
const (
	NoteTensorCore                NumericalNote = 0
	NoteDownConvertInputs         NumericalNote = 1
	NoteReducedPrecisionReduction NumericalNote = 2
	NoteFFT                       NumericalNote = 3
	NoteNondeterministic          NumericalNote = 4
	NoteWinograd                  NumericalNote = 5
)

// BehaviorNoteRuntimeCompilation marks engines whose kernels cuDNN compiles
// when their plan is finalized (runtime fusion).
const BehaviorNoteRuntimeCompilation = 0

// Desc is a backend descriptor (cudnnBackendDescriptor_t). One goroutine uses
// it at a time; Destroy releases it.
type Desc struct{ d C.hnd }

// NewDesc creates a backend descriptor of type t.
func (l *Lib) NewDesc(t DescType) (Desc, error) {
	if err := l.loadBackend(); err != nil {
		return Desc{}, err
	}
	var d C.hnd
	if err := check(C.b_Create(C.int(t), &d)); err != nil {
		return Desc{}, fmt.Errorf("cudnn: create backend descriptor %d: %w", t, err)
	}
	return Desc{d}, nil
}

// Destroy releases the descriptor; the zero value is ignored.
func (d Desc) Destroy() {
	if d.d != nil {
		C.b_Destroy(d.d)
	}
}

// IsZero reports whether d was never created.
func (d Desc) IsZero() bool { return d.d == nil }

// Finalize checks and freezes the descriptor's attributes.
func (d Desc) Finalize() error { return check(C.b_Finalize(d.d)) }

// SetInt64s sets an INT64 array attribute.
func (d Desc) SetInt64s(a Attr, v ...int64) error {
	if len(v) == 1 {
		return check(C.b_SetI64(d.d, C.int(a), C.int(TypeInt64), C.int64_t(v[0])))
	}
	return setArray(d, a, TypeInt64, v, func(x int64) C.int64_t { return C.int64_t(x) })
}

// SetEnum sets a one-value attribute of an enum type t (data type, modes).
func (d Desc) SetEnum(a Attr, t AttrType, v int) error {
	return check(C.b_SetI32(d.d, C.int(a), C.int(t), C.int32_t(v)))
}

// SetFloat sets a FLOAT attribute.
func (d Desc) SetFloat(a Attr, v float32) error { return check(C.b_SetF32(d.d, C.int(a), C.float(v))) }

// SetBool sets a BOOLEAN attribute.
func (d Desc) SetBool(a Attr, v bool) error { return check(C.b_SetBool(d.d, C.int(a), C.bool(v))) }

// SetHandle sets a HANDLE attribute.
func (d Desc) SetHandle(a Attr, h Handle) error {
	return check(C.b_SetPtr(d.d, C.int(a), C.int(TypeHandle), C.uintptr_t(uintptr(h.h))))
}

// SetDescs sets a BACKEND_DESCRIPTOR array attribute.
func (d Desc) SetDescs(a Attr, v ...Desc) error {
	if len(v) == 1 {
		return check(C.b_SetPtr(d.d, C.int(a), C.int(TypeDescriptor), C.uintptr_t(uintptr(v[0].d))))
	}
	return setArray(d, a, TypeDescriptor, v, func(x Desc) C.hnd { return x.d })
}

// SetPointers sets a VOID_PTR array attribute to device addresses.
func (d Desc) SetPointers(a Attr, v ...uintptr) error {
	if len(v) == 1 {
		return check(C.b_SetPtr(d.d, C.int(a), C.int(TypeVoidPtr), C.uintptr_t(v[0])))
	}
	return setArray(d, a, TypeVoidPtr, v, func(x uintptr) C.uintptr_t { return C.uintptr_t(x) })
}

// setArray sets an array attribute of type t to v, each value converted by
// conv into C memory that lives for the call.
func setArray[G, CT any](d Desc, a Attr, t AttrType, v []G, conv func(G) CT) error {
	var zero CT
	c := C.malloc(C.size_t(unsafe.Sizeof(zero) * uintptr(len(v))))
	defer C.free(c)
	cs := unsafe.Slice((*CT)(c), len(v))
	for i, x := range v {
		cs[i] = conv(x)
	}
	return check(C.b_SetAttr(d.d, C.int(a), C.int(t), C.int64_t(len(v)), c))
}

// Int64 reads a one-value INT64 attribute.
func (d Desc) Int64(a Attr) (int64, error) {
	var v, n C.int64_t
	if err := check(C.b_GetAttr(d.d, C.int(a), C.int(TypeInt64), 1, &n, unsafe.Pointer(&v))); err != nil {
		return 0, err
	}
	return int64(v), nil
}

// Enums reads up to max values of an enum-array attribute of type t.
func (d Desc) Enums(a Attr, t AttrType, max int) ([]int, error) {
	c := (*C.int32_t)(C.malloc(C.size_t(4 * max)))
	defer C.free(unsafe.Pointer(c))
	var n C.int64_t
	if err := check(C.b_GetAttr(d.d, C.int(a), C.int(t), C.int64_t(max), &n, unsafe.Pointer(c))); err != nil {
		return nil, err
	}
	out := make([]int, int(n))
	for i, x := range unsafe.Slice(c, int(n)) {
		out[i] = int(x)
	}
	return out, nil
}

// Count is the number of elements a BACKEND_DESCRIPTOR array attribute holds.
func (d Desc) Count(a Attr) (int, error) {
	var n C.int64_t
	if err := check(C.b_GetAttr(d.d, C.int(a), C.int(TypeDescriptor), 0, &n, nil)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Descs fills into, descriptors the caller created of the right type, from a
// BACKEND_DESCRIPTOR array attribute and returns how many were filled.
func (d Desc) Descs(a Attr, into []Desc) (int, error) {
	if len(into) == 0 {
		return 0, nil
	}
	c := (*C.hnd)(C.malloc(C.size_t(unsafe.Sizeof(C.hnd(nil)) * uintptr(len(into)))))
	defer C.free(unsafe.Pointer(c))
	cs := unsafe.Slice(c, len(into))
	for i, x := range into {
		cs[i] = x.d
	}
	var n C.int64_t
	if err := check(C.b_GetAttr(d.d, C.int(a), C.int(TypeDescriptor), C.int64_t(len(into)), &n, unsafe.Pointer(c))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Execute enqueues plan on the handle's stream with the buffers of pack
// (cudnnBackendExecute).
func (h Handle) Execute(plan, pack Desc) error { return check(C.b_Execute(h.h, plan.d, pack.d)) }

package cudnn

import "fmt"

// Status is a cuDNN status code other than success. cuDNN 9 groups its codes by
// thousands (2000s: bad parameter, 3000s: not supported, 4000s: internal error,
// 5000s: execution failed); errors.Is(err, StatusBadParam) matches any code of
// that group.
type Status int

// Status groups and common codes (cuDNN 9 numbering).
const (
	StatusNotInitialized  Status = 1001
	StatusBadParam        Status = 2000
	StatusNotSupported    Status = 3000
	StatusInternalError   Status = 4000
	StatusAllocFailed     Status = 4001
	StatusExecutionFailed Status = 5000
)

// describe turns a code into text; the cuda build asks cuDNN itself.
var describe = func(s Status) string { return "" }

// Error returns "cudnn: status CODE: cuDNN's message".
func (s Status) Error() string {
	if msg := describe(s); msg != "" {
		return fmt.Sprintf("cudnn: status %d: %s", int(s), msg)
	}
	return fmt.Sprintf("cudnn: status %d", int(s))
}

// Is reports whether target is s, or is the group code (a multiple of 1000) s
// belongs to.
func (s Status) Is(target error) bool {
	t, ok := target.(Status)
	if !ok {
		return false
	}
	return t == s || (t%1000 == 0 && int(s)/1000 == int(t)/1000)
}

// DataType is cudnnDataType_t.
type DataType int

// Data types.
const (
	Float  DataType = 0
	Double DataType = 1
	Half   DataType = 2
)

// Format is cudnnTensorFormat_t.
type Format int

// Tensor layouts.
const (
	NCHW Format = 0
	NHWC Format = 1
)

// ConvMode is cudnnConvolutionMode_t.
type ConvMode int

// Convolution modes; deep-learning frameworks use CrossCorrelation.
const (
	Convolution      ConvMode = 0
	CrossCorrelation ConvMode = 1
)

// MathType is cudnnMathType_t.
type MathType int

// Math types: FMAMath forbids tensor cores (no TF32 for float data);
// DefaultMath and TensorOpMath allow them.
const (
	DefaultMath                 MathType = 0
	TensorOpMath                MathType = 1
	TensorOpMathAllowConversion MathType = 2
	FMAMath                     MathType = 3
)

// ActivationMode is cudnnActivationMode_t.
type ActivationMode int

// Activation modes used here.
const (
	ActivationReLU     ActivationMode = 1
	ActivationIdentity ActivationMode = 5
)

// NanPropagation is cudnnNanPropagation_t.
type NanPropagation int

// NaN handling.
const (
	NotPropagateNaN NanPropagation = 0
	PropagateNaN    NanPropagation = 1
)

// PoolingMode is cudnnPoolingMode_t.
type PoolingMode int

// Pooling modes.
const (
	PoolingMax                   PoolingMode = 0
	PoolingAverageIncludePadding PoolingMode = 1
	PoolingAverageExcludePadding PoolingMode = 2
	PoolingMaxDeterministic      PoolingMode = 3
)

// ConvFwdAlgo is cudnnConvolutionFwdAlgo_t.
type ConvFwdAlgo int

// Forward convolution algorithms.
const (
	AlgoImplicitGEMM        ConvFwdAlgo = 0
	AlgoImplicitPrecompGEMM ConvFwdAlgo = 1
	AlgoGEMM                ConvFwdAlgo = 2
	AlgoDirect              ConvFwdAlgo = 3
	AlgoFFT                 ConvFwdAlgo = 4
	AlgoFFTTiling           ConvFwdAlgo = 5
	AlgoWinograd            ConvFwdAlgo = 6
	AlgoWinogradNonfused    ConvFwdAlgo = 7
	algoCount                           = 8
)

// AlgoPerf is one result of an algorithm search (cudnnConvolutionFwdAlgoPerf_t).
type AlgoPerf struct {
	Algo     ConvFwdAlgo
	Err      error   // nil when the algorithm ran (or would run) successfully
	Time     float32 // milliseconds measured by Find; negative for heuristics
	Memory   uintptr // workspace bytes the algorithm needs
	MathType MathType
}

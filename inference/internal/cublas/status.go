package cublas

import "fmt"

// Status is a cuBLAS status code other than success; it works with errors.Is.
type Status int

// Status codes (cublasStatus_t).
const (
	StatusNotInitialized  Status = 1
	StatusAllocFailed     Status = 3
	StatusInvalidValue    Status = 7
	StatusArchMismatch    Status = 8
	StatusMappingError    Status = 11
	StatusExecutionFailed Status = 13
	StatusInternalError   Status = 14
	StatusNotSupported    Status = 15
	StatusLicenseError    Status = 16
)

var statusNames = map[Status]string{
	StatusNotInitialized:  "CUBLAS_STATUS_NOT_INITIALIZED",
	StatusAllocFailed:     "CUBLAS_STATUS_ALLOC_FAILED",
	StatusInvalidValue:    "CUBLAS_STATUS_INVALID_VALUE",
	StatusArchMismatch:    "CUBLAS_STATUS_ARCH_MISMATCH",
	StatusMappingError:    "CUBLAS_STATUS_MAPPING_ERROR",
	StatusExecutionFailed: "CUBLAS_STATUS_EXECUTION_FAILED",
	StatusInternalError:   "CUBLAS_STATUS_INTERNAL_ERROR",
	StatusNotSupported:    "CUBLAS_STATUS_NOT_SUPPORTED",
	StatusLicenseError:    "CUBLAS_STATUS_LICENSE_ERROR",
}

// Error returns "cublas: NAME (CODE)".
func (s Status) Error() string {
	if name, ok := statusNames[s]; ok {
		return fmt.Sprintf("cublas: %s (%d)", name, int(s))
	}
	return fmt.Sprintf("cublas: status %d", int(s))
}

// Math is cublasMath_t.
type Math int

// Math modes: DefaultMath keeps fp32 GEMMs in fp32 (no TF32 unless the
// NVIDIA_TF32_OVERRIDE environment variable says so), PedanticMath forbids any
// reduced precision, TF32Math allows TF32 tensor cores.
const (
	DefaultMath  Math = 0
	PedanticMath Math = 2
	TF32Math     Math = 3
)

// Op is cublasOperation_t.
type Op int

// Operations on a GEMM operand.
const (
	OpN Op = 0 // as stored
	OpT Op = 1 // transposed
)

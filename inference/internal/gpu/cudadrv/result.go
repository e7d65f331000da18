package cudadrv

import "fmt"

// Result is a CUDA driver error code (CUresult other than CUDA_SUCCESS); it
// works with errors.Is.
type Result int

// Error codes used by callers.
const (
	ErrOutOfMemory      Result = 2
	ErrNotInitialized   Result = 3
	ErrIllegalAddress   Result = 700
	ErrLaunchFailed     Result = 719
	ErrStreamCaptureInv Result = 901
)

// Error returns "CUDA_ERROR_NAME (CODE)" (the name once the driver is
// loaded), or "CUDA error CODE". Callers wrap it with the operation.
func (r Result) Error() string {
	if n := errName(r); n != "" {
		return fmt.Sprintf("%s (%d)", n, int(r))
	}
	return fmt.Sprintf("CUDA error %d", int(r))
}

// Sticky reports whether code leaves the CUDA context unusable (memory faults,
// failed launches, hardware errors): the process must make a new context.
func Sticky(code int) bool {
	switch code {
	case 214, // ECC uncorrectable
		700, // illegal address
		702, // launch timeout
		714, // hardware stack error
		715, // illegal instruction
		716, // misaligned address
		717, // invalid address space
		718, // invalid PC
		719, // launch failed
		720, // cooperative launch too large
		709, // context is destroyed
		999: // unknown
		return true
	}
	return false
}

package cpu

import (
	"runtime/debug"

	"github.com/inferbench/inferbench/inference/metrics"
)

// resetPeakRSS starts a sub-benchmark's peak resident set size: memory earlier
// sub-benchmarks left behind is returned to the system, then the process's
// high-water mark (VmHWM, which peakRSS reads) is reset to what is resident
// now. It reports whether the reset worked (Linux).
func resetPeakRSS() bool {
	debug.FreeOSMemory()
	return metrics.ResetPeakRSS() == nil
}

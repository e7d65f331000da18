package metrics

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrNoPeakRSS is returned where the process's peak resident set size cannot
// be read or reset (systems without Linux's /proc/self/status and
// /proc/self/clear_refs).
var ErrNoPeakRSS = errors.New("metrics: the peak resident set size is not available on this system")

// ResetPeakRSS resets the process's resident-set high-water mark to its
// current resident set size (Linux: "5" written to /proc/self/clear_refs), so
// that PeakRSS measures from now instead of from the process's start. Call
// runtime/debug.FreeOSMemory first to start from the live heap rather than
// from memory an earlier phase left resident.
func ResetPeakRSS() error {
	err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoPeakRSS, err)
	}
	return nil
}

// PeakRSS returns the high-water mark of the process's resident set size, in
// bytes, since the process started or since the last ResetPeakRSS (Linux:
// VmHWM in /proc/self/status).
func PeakRSS() (int64, error) {
	return procStatus("VmHWM")
}

// RSS returns the process's resident set size now, in bytes (VmRSS).
func RSS() (int64, error) {
	return procStatus("VmRSS")
}

// procStatus returns the "key: N kB" field of /proc/self/status in bytes.
func procStatus(key string) (int64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoPeakRSS, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		v, ok := strings.CutPrefix(line, key+":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("metrics: /proc/self/status %s: %w", key, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("%w: no %s in /proc/self/status", ErrNoPeakRSS, key)
}

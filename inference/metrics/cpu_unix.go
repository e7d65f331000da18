//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package metrics

import (
	"fmt"
	"syscall"
	"time"
)

// processCPUTime returns the user plus system CPU time the process has used.
func processCPUTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("metrics: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

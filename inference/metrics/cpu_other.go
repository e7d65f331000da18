//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package metrics

import "time"

// processCPUTime is not available here.
func processCPUTime() (time.Duration, error) { return 0, ErrNoRusage }

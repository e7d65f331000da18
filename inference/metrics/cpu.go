package metrics

import (
	"errors"
	"runtime"
	"time"
)

// ErrNoRusage is returned by CPUSampler.Start on systems without getrusage.
var ErrNoRusage = errors.New("metrics: process CPU time is not available on this system")

// A CPUSampler measures the process's CPU utilisation over an interval: user
// plus system CPU time of the whole process (getrusage RUSAGE_SELF) divided by
// wall time times runtime.NumCPU(), in percent (100 means every core busy for
// the whole interval). The cpu back-end reports it as its utilisation sampler.
//
// The zero value is ready. Start and Stop are called from one goroutine, in
// turn. On systems without getrusage, Start returns an error.
type CPUSampler struct {
	started bool
	wall    time.Time
	cpu     time.Duration
}

// Start begins an interval.
func (s *CPUSampler) Start() error {
	cpu, err := processCPUTime()
	if err != nil {
		return err
	}
	s.started, s.wall, s.cpu = true, time.Now(), cpu
	return nil
}

// Stop ends the interval begun by Start and returns the process's CPU
// utilisation over it in percent (the whole interval is measured at once, not
// sampled).
func (s *CPUSampler) Stop() (percent float64, err error) {
	if !s.started {
		return 0, errors.New("metrics: CPUSampler.Stop without Start")
	}
	cpu, err := processCPUTime()
	if err != nil {
		return 0, err
	}
	wall := time.Since(s.wall)
	s.started = false
	if wall > 0 {
		percent = 100 * float64(cpu-s.cpu) / (float64(wall) * float64(runtime.NumCPU()))
	}
	return percent, nil
}

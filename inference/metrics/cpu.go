package metrics

import (
	"errors"
	"runtime"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
)

// CPUUtilName is the metric name a CPUSampler reports.
const CPUUtilName = "cpu-util-pct"

// ErrNoRusage is returned by CPUSampler.Start on systems without getrusage.
var ErrNoRusage = errors.New("metrics: process CPU time is not available on this system")

var _ backend.Sampler = (*CPUSampler)(nil)

// A CPUSampler measures the process's CPU utilisation over an interval: user
// plus system CPU time of the whole process (getrusage RUSAGE_SELF) divided by
// wall time times runtime.NumCPU(), in percent (100 means every core busy for
// the whole interval). It implements backend.Sampler.
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

// Stop ends the interval begun by Start and returns the utilisation as
// Utilization{Name: "cpu-util-pct", Percent: ...}; Samples is 0 because the
// whole interval is measured at once.
func (s *CPUSampler) Stop() (backend.Utilization, error) {
	if !s.started {
		return backend.Utilization{}, errors.New("metrics: CPUSampler.Stop without Start")
	}
	cpu, err := processCPUTime()
	if err != nil {
		return backend.Utilization{}, err
	}
	wall := time.Since(s.wall)
	s.started = false
	u := backend.Utilization{Name: CPUUtilName}
	if wall > 0 {
		u.Percent = 100 * float64(cpu-s.cpu) / (float64(wall) * float64(runtime.NumCPU()))
	}
	return u, nil
}

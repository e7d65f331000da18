// Package nvml samples GPU utilisation through NVIDIA's management library
// (github.com/NVIDIA/go-nvml, which loads libnvidia-ml.so.1 at run time).
//
// A Sampler:
//
//  1. is made by Open for a list of devices, named by their PCI location, and a
//     period (default 100 ms);
//  2. on Start, runs one goroutine that reads every device's utilisation.gpu at
//     the end of every period (not at Start: NVML's figure describes the recent
//     past, which is before the interval);
//  3. on Stop, stops and waits for that goroutine and returns the mean over all
//     samples and devices and how many device readings it averages (none for
//     an interval shorter than a period: the mean is then not a measurement);
//  4. on Close, shuts NVML down (idempotent).
//
// NVML is only reached in builds with the cuda tag; elsewhere Open fails.
package nvml

import (
	"fmt"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference/metrics"
)

// PCI is where a GPU sits on the PCI bus. CUDA and NVML number devices
// differently (CUDA_VISIBLE_DEVICES renumbers CUDA's, and CUDA may order them by
// speed), so devices are matched by this location, which both report.
type PCI struct{ Domain, Bus, Device uint32 }

// String formats p as NVML and lspci do: "0000:1b:00.0".
func (p PCI) String() string { return fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device) }

// DefaultPeriod is the sampling period used when Open is given 0.
const DefaultPeriod = 100 * time.Millisecond

// reader returns the utilisation of every sampled device, in percent.
type reader func() ([]float64, error)

// Sampler averages utilisation samples over intervals (a metrics.Periodic
// whose readings are the devices' utilisation). Start and Stop are called
// from one goroutine, in turn; Close may be called from any goroutine.
type Sampler struct {
	*metrics.Periodic
	close     func() error
	closeOnce sync.Once
	closeErr  error
}

func newSampler(period time.Duration, read reader, closeFn func() error) *Sampler {
	if period <= 0 {
		period = DefaultPeriod
	}
	return &Sampler{Periodic: metrics.NewPeriodic(period, read), close: closeFn}
}

// Close stops a running interval and releases NVML. It is idempotent.
func (s *Sampler) Close() error {
	s.closeOnce.Do(func() {
		if s.Running() {
			_, _, _ = s.Stop()
		}
		if s.close != nil {
			s.closeErr = s.close()
		}
	})
	return s.closeErr
}

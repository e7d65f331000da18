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
	"errors"
	"fmt"
	"sync"
	"time"
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

// Sampler averages utilisation samples over intervals. Start and Stop are called
// from one goroutine, in turn; Close may be called from any goroutine.
type Sampler struct {
	period time.Duration
	read   reader
	close  func() error

	mu      sync.Mutex
	sum     float64
	samples int
	err     error // first read error of the interval

	stop chan struct{} // non-nil while an interval runs
	done chan struct{}

	closeOnce sync.Once
	closeErr  error
}

func newSampler(period time.Duration, read reader, closeFn func() error) *Sampler {
	if period <= 0 {
		period = DefaultPeriod
	}
	return &Sampler{period: period, read: read, close: closeFn}
}

// Period is the time between samples.
func (s *Sampler) Period() time.Duration { return s.period }

// Start begins an interval: one sample after every period.
func (s *Sampler) Start() error {
	if s.stop != nil {
		return errors.New("nvml: Start called twice without Stop")
	}
	s.mu.Lock()
	s.sum, s.samples, s.err = 0, 0, nil
	s.mu.Unlock()
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.loop(s.stop, s.done)
	return nil
}

func (s *Sampler) loop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(s.period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

func (s *Sampler) sample() {
	v, err := s.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return
	}
	for _, u := range v {
		s.sum += u
		s.samples++
	}
}

// Stop ends the interval, waits for the sampling goroutine, and returns the mean
// utilisation in percent and the number of device samples it averages. The
// error is the first failed read, if any.
func (s *Sampler) Stop() (mean float64, samples int, err error) {
	if s.stop == nil {
		return 0, 0, errors.New("nvml: Stop called without Start")
	}
	close(s.stop)
	<-s.done
	s.stop, s.done = nil, nil
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.samples > 0 {
		mean = s.sum / float64(s.samples)
	}
	return mean, s.samples, s.err
}

// Close stops a running interval and releases NVML. It is idempotent.
func (s *Sampler) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			_, _, _ = s.Stop()
		}
		if s.close != nil {
			s.closeErr = s.close()
		}
	})
	return s.closeErr
}

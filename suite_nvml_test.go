//go:build cuda && linux && cgo

package inferbench_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/inferbench/inferbench/inference/backend"
)

// gpuSampler returns a sampler of NVML's utilization.gpu of the GPUs on
// which any of the processes pids holds a context (NVML's running compute
// processes), read every 100 ms between Start and Stop and averaged over
// samples and GPUs, as the cuda back-end samples its own devices. Close
// shuts NVML down.
func gpuSampler(pids []int) (*nvmlSampler, error) {
	if r := nvml.Init(); r != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: init: %v", r)
	}
	s := &nvmlSampler{}
	n, r := nvml.DeviceGetCount()
	if r != nvml.SUCCESS {
		s.Close()
		return nil, fmt.Errorf("nvml: device count: %v", r)
	}
	for i := range n {
		d, r := nvml.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			s.Close()
			return nil, fmt.Errorf("nvml: device %d: %v", i, r)
		}
		procs, r := d.GetComputeRunningProcesses()
		if r != nvml.SUCCESS {
			s.Close()
			return nil, fmt.Errorf("nvml: device %d: compute processes: %v", i, r)
		}
		if slices.ContainsFunc(procs, func(p nvml.ProcessInfo) bool { return slices.Contains(pids, int(p.Pid)) }) {
			s.devs = append(s.devs, d)
		}
	}
	if len(s.devs) == 0 {
		s.Close()
		return nil, fmt.Errorf("nvml: no GPU lists the server processes %v among its compute processes (a PID namespace of their own?)", pids)
	}
	return s, nil
}

// nvmlSampler samples the utilisation of devs; Start and Stop are called in
// turn from one goroutine.
type nvmlSampler struct {
	devs []nvml.Device
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	sum     float64
	samples int
	err     error

	closeOnce sync.Once
}

func (s *nvmlSampler) Start() error {
	if s.stop != nil {
		return errors.New("nvml sampler started twice")
	}
	s.mu.Lock()
	s.sum, s.samples, s.err = 0, 0, nil
	s.mu.Unlock()
	s.stop = make(chan struct{})
	stop := s.stop
	s.wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	})
	return nil
}

// sample reads every device once; a sample counts only if all were read.
func (s *nvmlSampler) sample() {
	var sum float64
	for _, d := range s.devs {
		u, r := d.GetUtilizationRates()
		if r != nvml.SUCCESS {
			s.mu.Lock()
			if s.err == nil {
				s.err = fmt.Errorf("nvml: utilisation: %v", r)
			}
			s.mu.Unlock()
			return
		}
		sum += float64(u.Gpu)
	}
	s.mu.Lock()
	s.sum += sum / float64(len(s.devs))
	s.samples++
	s.mu.Unlock()
}

func (s *nvmlSampler) Stop() (backend.Utilization, error) {
	if s.stop == nil {
		return backend.Utilization{}, errors.New("nvml sampler stopped without Start")
	}
	close(s.stop)
	s.wg.Wait()
	s.stop = nil
	s.mu.Lock()
	defer s.mu.Unlock()
	u := backend.Utilization{Kind: backend.GPUUtilization, Samples: s.samples}
	if s.samples > 0 {
		u.Percent = s.sum / float64(s.samples)
	}
	return u, s.err
}

// Close shuts NVML down; calling it again does nothing.
func (s *nvmlSampler) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if r := nvml.Shutdown(); r != nvml.SUCCESS {
			err = fmt.Errorf("nvml: shutdown: %v", r)
		}
	})
	return err
}

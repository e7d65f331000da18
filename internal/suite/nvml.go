//go:build cuda && linux && cgo

package suite

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/metrics"
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
	s.Periodic = metrics.NewPeriodic(100*time.Millisecond, s.read)
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

// nvmlSampler samples the utilisation of devs: one reading every period, the
// devices' mean (a sample counts only if every device was read). Start and
// Stop are called in turn from one goroutine.
type nvmlSampler struct {
	devs []nvml.Device
	*metrics.Periodic
	closeOnce sync.Once
}

// read is one sample: the devices' mean utilisation in percent.
func (s *nvmlSampler) read() ([]float64, error) {
	var sum float64
	for _, d := range s.devs {
		u, r := d.GetUtilizationRates()
		if r != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml: utilisation: %v", r)
		}
		sum += float64(u.Gpu)
	}
	return []float64{sum / float64(len(s.devs))}, nil
}

func (s *nvmlSampler) Stop() (backend.Utilization, error) {
	mean, n, err := s.Periodic.Stop()
	return backend.Utilization{Kind: backend.GPUUtilization, Percent: mean, Samples: n}, err
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

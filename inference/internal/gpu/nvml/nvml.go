//go:build cuda && linux && cgo

package nvml

import (
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func ret(r nvml.Return) error {
	if r == nvml.SUCCESS {
		return nil
	}
	return r
}

// Open initialises NVML and prepares a Sampler for the GPUs at the given PCI
// locations, sampling every period (DefaultPeriod when 0).
func Open(gpus []PCI, period time.Duration) (*Sampler, error) {
	if len(gpus) == 0 {
		return nil, errors.New("nvml: no devices to sample")
	}
	if err := ret(nvml.Init()); err != nil {
		return nil, fmt.Errorf("nvml: init (is libnvidia-ml.so.1 installed?): %w", err)
	}
	devs, err := handles(gpus)
	if err != nil {
		_ = nvml.Shutdown()
		return nil, err
	}
	read := func() ([]float64, error) {
		out := make([]float64, len(devs))
		for k, d := range devs {
			u, r := d.GetUtilizationRates()
			if err := ret(r); err != nil {
				return nil, fmt.Errorf("nvml: device %s: utilisation: %w", gpus[k], err)
			}
			out[k] = float64(u.Gpu)
		}
		return out, nil
	}
	shutdown := func() error { return ret(nvml.Shutdown()) }
	return newSampler(period, read, shutdown), nil
}

// handles finds the NVML device at each PCI location.
func handles(gpus []PCI) ([]nvml.Device, error) {
	n, r := nvml.DeviceGetCount()
	if err := ret(r); err != nil {
		return nil, fmt.Errorf("nvml: device count: %w", err)
	}
	at := map[PCI]nvml.Device{}
	for i := range n {
		d, r := nvml.DeviceGetHandleByIndex(i)
		if err := ret(r); err != nil {
			return nil, fmt.Errorf("nvml: device %d: handle: %w", i, err)
		}
		info, r := d.GetPciInfo()
		if err := ret(r); err != nil {
			return nil, fmt.Errorf("nvml: device %d: PCI info: %w", i, err)
		}
		at[PCI{info.Domain, info.Bus, info.Device}] = d
	}
	devs := make([]nvml.Device, len(gpus))
	for k, p := range gpus {
		d, ok := at[p]
		if !ok {
			return nil, fmt.Errorf("nvml: no device at PCI %s among NVML's %d", p, n)
		}
		devs[k] = d
	}
	return devs, nil
}

// DriverVersion returns the NVIDIA driver version ("580.159.04").
func DriverVersion() (string, error) {
	if err := ret(nvml.Init()); err != nil {
		return "", fmt.Errorf("nvml: init: %w", err)
	}
	defer nvml.Shutdown()
	v, r := nvml.SystemGetDriverVersion()
	if err := ret(r); err != nil {
		return "", fmt.Errorf("nvml: driver version: %w", err)
	}
	return v, nil
}

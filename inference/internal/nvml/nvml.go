//go:build cuda && linux && cgo

package nvml

import (
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

// Open initialises NVML and prepares a Sampler for the devices with the given
// NVML indices (device 0 when indices is empty), sampling every period
// (DefaultPeriod when 0).
func Open(indices []int, period time.Duration) (*Sampler, error) {
	if len(indices) == 0 {
		indices = []int{0}
	}
	if err := ret(nvml.Init()); err != nil {
		return nil, fmt.Errorf("nvml: init (is libnvidia-ml.so.1 installed?): %w", err)
	}
	devs := make([]nvml.Device, len(indices))
	for k, i := range indices {
		d, r := nvml.DeviceGetHandleByIndex(i)
		if err := ret(r); err != nil {
			_ = nvml.Shutdown()
			return nil, deviceErr(i, "handle", err)
		}
		devs[k] = d
	}
	read := func() ([]float64, error) {
		out := make([]float64, len(devs))
		for k, d := range devs {
			u, r := d.GetUtilizationRates()
			if err := ret(r); err != nil {
				return nil, deviceErr(indices[k], "utilisation", err)
			}
			out[k] = float64(u.Gpu)
		}
		return out, nil
	}
	shutdown := func() error { return ret(nvml.Shutdown()) }
	return newSampler(period, read, shutdown), nil
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

//go:build !(cuda && linux && cgo)

package suite

import (
	"errors"

	"github.com/inferbench/inferbench/inference/backend"
)

// gpuSampler needs NVML, which only cuda builds on Linux reach.
func gpuSampler(pids []int) (*nvmlSampler, error) {
	return nil, errors.New("no NVML in this build (needs -tags cuda on Linux with cgo)")
}

// nvmlSampler is never made in this build.
type nvmlSampler struct{}

func (*nvmlSampler) Start() error { return errors.New("no NVML in this build") }
func (*nvmlSampler) Stop() (backend.Utilization, error) {
	return backend.Utilization{}, errors.New("no NVML in this build")
}
func (*nvmlSampler) Close() error { return nil }

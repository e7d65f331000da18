package inference

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/checkpoint"
	"github.com/inferbench/inferbench/inference/cpu"
	"github.com/inferbench/inferbench/inference/cuda"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
)

// BackendByName returns the back-end called name: "cpu" (or ""), "cuda" or
// "nop" (a zero-cost model, for measuring the server itself). The cuda
// back-end needs a build with -tags cuda; otherwise its Open fails with
// backend.ErrNoGPU.
func BackendByName(name string) (backend.Backend, error) {
	switch name {
	case "", "cpu":
		return cpu.New(), nil
	case "cuda":
		return cuda.New(), nil
	case "nop":
		return nop.New(), nil
	}
	return nil, fmt.Errorf("inference: unknown back-end %q (want cpu, cuda or nop)", name)
}

// DescribeGPU returns config lines for the GPUs the cuda back-end would use
// (name, driver, CUDA, cuDNN and cuBLAS versions), or an error wrapping
// backend.ErrNoGPU when there is none or the build lacks -tags cuda.
func DescribeGPU() ([]backend.KV, error) { return cuda.Describe() }

func loadCheckpoint(path string) (*resnet.Model, error) {
	m, err := checkpoint.LoadResNet(path)
	if err != nil {
		return nil, fmt.Errorf("inference: %w", err)
	}
	return m, nil
}

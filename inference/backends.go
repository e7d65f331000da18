package inference

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/cpu"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
)

// BackendByName returns the back-end called name: "cpu" (or ""), "cuda" or
// "nop" (a zero-cost model, for measuring the server itself).
func BackendByName(name string) (backend.Backend, error) {
	switch name {
	case "", "cpu":
		return cpu.New(), nil
	case "nop":
		return nop.New(), nil
	}
	return nil, fmt.Errorf("inference: unknown back-end %q (want cpu, cuda or nop)", name)
}

func loadCheckpoint(path string) (*resnet.Model, error) {
	return nil, fmt.Errorf("inference: checkpoint loading is not available yet (%s)", path)
}

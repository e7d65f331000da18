//go:build !(cuda && linux && cgo)

package cuda

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// Open fails: this build has no GPU support.
func (cudaBackend) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	return nil, fmt.Errorf("cuda: %w", backend.ErrNoGPU)
}

// Describe fails: this build has no GPU support.
func Describe() ([]backend.KV, error) {
	return nil, fmt.Errorf("cuda: %w", backend.ErrNoGPU)
}

// Start does nothing: this build has no GPU support (Open says so).
func (cudaBackend) Start(backend.Options) (stop func()) { return func() {} }

package inferbench_test

import (
	"github.com/inferbench/inferbench/inference/backend"
)

// gpuAvailable reports whether the cuda back-end can run here.
func gpuAvailable() error { return backend.ErrNoGPU }

// deviceConfig returns the GPU's config lines, or none.
func deviceConfig() []backend.KV { return nil }

//go:build !(cuda && linux && cgo)

package cublas

import "errors"

// Lib is the loaded cuBLAS library; this build cannot load it.
type Lib struct{}

// Load always fails in this build.
func Load() (*Lib, error) {
	return nil, errors.New("cublas: not available in this build (needs -tags cuda, linux and cgo)")
}

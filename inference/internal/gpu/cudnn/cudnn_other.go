//go:build !(cuda && linux && cgo)

package cudnn

import "errors"

// Lib is the loaded cuDNN library; this build cannot load it.
type Lib struct{}

// Preload does nothing in this build.
func (l *Lib) Preload() {}

// Load always fails in this build.
func Load() (*Lib, error) {
	return nil, errors.New("cudnn: not available in this build (needs -tags cuda, linux and cgo)")
}

//go:build !(cuda && linux && cgo)

package nvml

import (
	"errors"
	"time"
)

var errUnsupported = errors.New("nvml: not available in this build (needs -tags cuda, linux and cgo)")

// Open always fails in this build.
func Open(gpus []PCI, period time.Duration) (*Sampler, error) { return nil, errUnsupported }

// DriverVersion always fails in this build.
func DriverVersion() (string, error) { return "", errUnsupported }

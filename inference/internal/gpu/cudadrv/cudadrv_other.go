//go:build !(cuda && linux && cgo)

package cudadrv

import "errors"

var errUnsupported = errors.New("cudadrv: not available in this build (needs -tags cuda, linux and cgo)")

// Init always fails in this build.
func Init() error { return errUnsupported }

func errName(r Result) string { return "" }

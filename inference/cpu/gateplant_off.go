//go:build !gateplant

package cpu

import "time"

// gatePlant is false outside the gateplant build: Compute's planted slowdown
// is dead code that the compiler removes, so a default build cannot change
// speed.
const gatePlant = false

func plantCompute(time.Time) {}

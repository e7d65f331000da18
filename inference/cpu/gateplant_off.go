//go:build !gateplant || !linux

package cpu

import "time"

// gatePlant is false outside the gateplant build on Linux: Compute's planted
// slowdown is dead code that the compiler removes, so a default build cannot
// change speed.
const gatePlant = false

func processCPU() time.Duration { return 0 }

func plantCompute(time.Duration) {}

//go:build gateplant

package cpu

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// The gateplant build plants a slowdown that the regression gate's power
// script (scripts/gate-power.sh) must catch: after each Compute, the worker
// spins for $GATE_PLANT_COMPUTE_PCT percent of the time the call took, so the
// back-end's compute costs that much more time and CPU. Unset or 0 plants
// nothing. Never in a default build (see gateplant_off.go).
const gatePlant = true

// PlantComputeEnv names the environment variable with Compute's planted
// slowdown in percent.
const PlantComputeEnv = "GATE_PLANT_COMPUTE_PCT"

// plantedCompute is the slowdown as a fraction of Compute's time, read once
// at start-up.
var plantedCompute = mustPlant(PlantComputeEnv)

// mustPlant reads a percentage from the environment variable name and says
// on stderr what it plants; a malformed value panics, so a power run cannot
// silently measure nothing.
func mustPlant(name string) float64 {
	f, err := parsePlant(os.Getenv(name))
	if err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	if f > 0 {
		fmt.Fprintf(os.Stderr, "gateplant: cpu Compute %g %% slower (%s)\n", 100*f, name)
	}
	return f
}

// parsePlant parses a percentage into a fraction; "" is none.
func parsePlant(s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	pct, err := strconv.ParseFloat(s, 64)
	if err != nil || pct < 0 || pct > 1000 {
		return 0, fmt.Errorf("%q: want a percentage from 0 to 1000", s)
	}
	return pct / 100, nil
}

// plantCompute spins for the planted share of the time since start.
func plantCompute(start time.Time) {
	if plantedCompute > 0 {
		spin(time.Duration(plantedCompute * float64(time.Since(start))))
	}
}

// spin busy-waits for d: the delay costs CPU time, as slower code would.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

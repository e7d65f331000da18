//go:build gateplant

package inference

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// The gateplant build plants a slowdown that the regression gate's power
// script (scripts/gate-power.sh) must catch: Submit spins for
// $GATE_PLANT_SUBMIT_NS nanoseconds before it does anything else. Unset or 0
// plants nothing. Never in a default build (see gateplant_off.go).
const gatePlant = true

// PlantSubmitEnv names the environment variable with Submit's planted delay in
// nanoseconds.
const PlantSubmitEnv = "GATE_PLANT_SUBMIT_NS"

// plantedSubmit is the delay Submit spins for, read once at start-up.
var plantedSubmit = mustPlant(PlantSubmitEnv)

// mustPlant reads a non-negative duration in nanoseconds from the environment
// variable name and says on stderr what it plants; a malformed value panics,
// so a power run cannot silently measure nothing.
func mustPlant(name string) time.Duration {
	d, err := parsePlant(os.Getenv(name))
	if err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	if d > 0 {
		fmt.Fprintf(os.Stderr, "gateplant: Server.Submit spins %v (%s)\n", d, name)
	}
	return d
}

// parsePlant parses a delay in nanoseconds; "" is none.
func parsePlant(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	ns, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("%q: want a whole number of nanoseconds, 0 or more", s)
	}
	return time.Duration(ns), nil
}

func plantSubmit() {
	if plantedSubmit > 0 {
		spin(plantedSubmit)
	}
}

// spin busy-waits for d: the delay costs CPU time, as slower code would.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

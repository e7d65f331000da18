//go:build gateplant && linux

package cpu

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// The gateplant build plants a slowdown that the regression gate's power
// script (scripts/gate-power.sh) must catch: after each Compute, the worker
// spins for $GATE_PLANT_COMPUTE_PCT percent of the CPU time the process used
// during the call, so the back-end's compute costs that much more, as slower
// code would, however busy the machine is (a share of wall time would cost
// more CPU the more other jobs stretch the call). Unset or 0 plants nothing.
// Never in a default build (see gateplant_off.go).
const gatePlant = true

// PlantComputeEnv names the environment variable with Compute's planted
// slowdown in percent.
const PlantComputeEnv = "GATE_PLANT_COMPUTE_PCT"

// plantedCompute is the slowdown as a fraction of Compute's CPU time, read
// once at start-up.
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
		fmt.Fprintf(os.Stderr, "gateplant: cpu Compute %g %% more CPU time (%s)\n", 100*f, name)
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

// The CPU-time clocks of clock_gettime(2). getrusage(2) would not do: it
// counts a running thread's time only up to the last scheduler tick.
const (
	clockProcessCPU = 2 // CLOCK_PROCESS_CPUTIME_ID
	clockThreadCPU  = 3 // CLOCK_THREAD_CPUTIME_ID
)

// processCPU returns the CPU time the process has used, when a slowdown is
// planted (0 otherwise: Compute need not pay for the system call).
func processCPU() time.Duration {
	if plantedCompute == 0 {
		return 0
	}
	return cpuTime(clockProcessCPU)
}

// plantCompute spins for the planted share of the process's CPU time since
// start, counted in this thread's CPU time. It spins on the wall clock (no
// system call: a loop of them would also slow the next call, through the
// caches and TLB they flush) and checks the CPU time it got in between.
func plantCompute(start time.Duration) {
	if plantedCompute == 0 {
		return
	}
	target := time.Duration(plantedCompute * float64(cpuTime(clockProcessCPU)-start))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := cpuTime(clockThreadCPU)
	for left := target; left > 0; left = target - (cpuTime(clockThreadCPU) - t0) {
		for s := time.Now(); time.Since(s) < left; {
		}
	}
}

// cpuTime reads one of the CPU-time clocks.
func cpuTime(clock uintptr) time.Duration {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clock, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(fmt.Sprintf("gateplant: clock_gettime(%d): %v", clock, errno))
	}
	return time.Duration(ts.Nano())
}

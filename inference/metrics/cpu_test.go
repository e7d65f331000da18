package metrics

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCPUSamplerBusy(t *testing.T) {
	var s CPUSampler
	wallStart := time.Now()
	if err := s.Start(); err != nil {
		t.Skipf("no process CPU time here: %v", err)
	}
	// Burn 100 ms of CPU time, however long that takes on a loaded machine.
	const burn = 100 * time.Millisecond
	cpu0, err := processCPUTime()
	require.NoError(t, err)
	x := 0
	for {
		for range 100_000 {
			x++
		}
		c, err := processCPUTime()
		require.NoError(t, err)
		if c-cpu0 >= burn {
			break
		}
	}
	pct, err := s.Stop()
	wall := time.Since(wallStart) // at least the sampler's interval
	require.NoError(t, err)

	assert.LessOrEqual(t, pct, 100.0+1, "at most every core")
	// percent * interval * cores is the CPU time the sampler saw; the test's
	// wall time bounds the interval from above, so this is at least the burn.
	seen := time.Duration(pct / 100 * float64(wall) * float64(runtime.NumCPU()))
	assert.GreaterOrEqual(t, seen, burn, "percent = %.1f over %v on %d cores (x=%d)", pct, wall, runtime.NumCPU(), x)
}

func TestCPUSamplerIdle(t *testing.T) {
	var s CPUSampler
	if err := s.Start(); err != nil {
		t.Skipf("no process CPU time here: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	pct, err := s.Stop()
	require.NoError(t, err)
	assert.Less(t, pct, 50/float64(runtime.NumCPU()), "sleeping uses little CPU")
	assert.GreaterOrEqual(t, pct, 0.0)
}

func TestCPUSamplerStopWithoutStart(t *testing.T) {
	var s CPUSampler
	_, err := s.Stop()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "metrics:")
}

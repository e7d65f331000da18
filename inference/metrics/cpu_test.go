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
	if err := s.Start(); err != nil {
		t.Skipf("no process CPU time here: %v", err)
	}
	// Spin one goroutine for 200 ms of wall time: about 100/NumCPU percent.
	deadline := time.Now().Add(200 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	u, err := s.Stop()
	require.NoError(t, err)
	assert.Equal(t, CPUUtilName, u.Name)
	assert.Zero(t, u.Samples)
	assert.False(t, u.HasBusy)
	oneCore := 100 / float64(runtime.NumCPU())
	// Another process may take the core from us, and the race detector adds
	// its own threads: accept a wide band around one core.
	assert.Greater(t, u.Percent, 0.3*oneCore, "a spinning goroutine shows (x=%d)", x)
	assert.LessOrEqual(t, u.Percent, 100.0+1)
}

func TestCPUSamplerIdle(t *testing.T) {
	var s CPUSampler
	if err := s.Start(); err != nil {
		t.Skipf("no process CPU time here: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	u, err := s.Stop()
	require.NoError(t, err)
	assert.Less(t, u.Percent, 50/float64(runtime.NumCPU()), "sleeping uses little CPU")
	assert.GreaterOrEqual(t, u.Percent, 0.0)
}

func TestCPUSamplerStopWithoutStart(t *testing.T) {
	var s CPUSampler
	_, err := s.Stop()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "metrics:")
}

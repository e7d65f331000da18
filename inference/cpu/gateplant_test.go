//go:build gateplant && linux

package cpu

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGatePlantParse(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		wantErr bool
	}{
		{"", 0, false},
		{"0", 0, false},
		{"10", 0.10, false},
		{"2.5", 0.025, false},
		{"-1", 0, true},
		{"1001", 0, true},
		{"10%", 0, true},
	}
	for _, tt := range tests {
		got, err := parsePlant(tt.in)
		if tt.wantErr {
			assert.Error(t, err, "parsePlant(%q)", tt.in)
			continue
		}
		require.NoError(t, err, "parsePlant(%q)", tt.in)
		assert.InDelta(t, tt.want, got, 1e-12, "parsePlant(%q)", tt.in)
	}
}

// TestGatePlantCompute: with a planted 50 %, after a call that used at least
// 4 ms of CPU the worker spins for at least 2 ms of its own CPU time (no
// upper bound: the machine is shared).
func TestGatePlantCompute(t *testing.T) {
	saved := plantedCompute
	t.Cleanup(func() { plantedCompute = saved })
	plantedCompute = 0.5
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := processCPU()
	for processCPU()-start < 4*time.Millisecond {
	}
	before := cpuTime(clockThreadCPU)
	plantCompute(start)
	assert.GreaterOrEqual(t, cpuTime(clockThreadCPU)-before, 2*time.Millisecond)
}

package cuda

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSplitSpan(t *testing.T) {
	const us = time.Microsecond
	tests := []struct {
		name                string
		span, enqueued, own time.Duration
		graph               bool
		compute, gap        time.Duration
		ok                  bool
	}{
		{"host-bound calls: the span beyond the pass's own time", 1500 * us, 1490 * us, 180 * us, false, 180 * us, 1320 * us, true},
		{"device-bound calls: the host finished before the device started", 5000 * us, -200 * us, 4900 * us, false, 5000 * us, 0, true},
		{"calls slowed by another worker after the host finished", 9000 * us, 600 * us, 4900 * us, false, 8400 * us, 600 * us, true},
		{"calls faster than calibrated", 170 * us, 150 * us, 180 * us, false, 170 * us, 0, true},
		{"graph: the device waits for the one launch", 200 * us, 12 * us, 0, true, 188 * us, 12 * us, true},
		{"graph reached after the host finished", 200 * us, -50 * us, 0, true, 200 * us, 0, true},
		{"graph: the bound never exceeds the span", 10 * us, 30 * us, 0, true, 0, 10 * us, true},
		{"calls of a size without calibration", 1500 * us, 1490 * us, 0, false, 1500 * us, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			compute, gap, ok := splitSpan(tt.span, tt.enqueued, tt.own, tt.graph)
			assert.Equal(t, tt.ok, ok, "ok")
			assert.Equal(t, tt.compute, compute, "compute")
			assert.Equal(t, tt.gap, gap, "gap")
			assert.Equal(t, tt.span, compute+gap, "compute + gap = span")
		})
	}
}

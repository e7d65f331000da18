package metrics

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// touch allocates n bytes and writes every page, so they become resident.
func touch(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		b[i] = 1
	}
	return b
}

func TestPeakRSSResets(t *testing.T) {
	if err := ResetPeakRSS(); err != nil {
		t.Skipf("no peak RSS here: %v", err)
	}
	const mib = 1 << 20
	before, err := RSS()
	require.NoError(t, err)
	big := touch(96 * mib)
	peak, err := PeakRSS()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, peak, before+90*mib, "the 96 MiB just touched count")
	runtime.KeepAlive(big)

	// Freed and returned to the system, the 96 MiB leave the resident set;
	// after a reset the high-water mark forgets them.
	big = nil
	debug.FreeOSMemory()
	require.NoError(t, ResetPeakRSS())
	after, err := PeakRSS()
	require.NoError(t, err)
	assert.Less(t, after, peak-64*mib, "peak after reset %d MiB, before %d MiB", after/mib, peak/mib)
	small := touch(16 * mib)
	grown, err := PeakRSS()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, grown, after+14*mib, "growth after the reset is seen")
	runtime.KeepAlive(small)
}

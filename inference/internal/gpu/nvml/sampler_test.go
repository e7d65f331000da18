package nvml

import (
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSamplerMean(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		read := func() ([]float64, error) {
			n := calls.Add(1)
			return []float64{float64(10 * n), 100}, nil // two devices
		}
		var closed int
		s := newSampler(0, read, func() error { closed++; return nil })
		assert.Equal(t, DefaultPeriod, s.Period())

		require.NoError(t, s.Start())
		time.Sleep(350 * time.Millisecond) // samples at 100, 200, 300 ms
		synctest.Wait()
		mean, n, err := s.Stop()
		require.NoError(t, err)
		assert.Equal(t, 6, n, "samples")
		assert.InDelta(t, (10+20+30+300)/6.0, mean, 1e-9, "mean")

		// A second interval starts from zero.
		require.NoError(t, s.Start())
		mean, n, err = s.Stop()
		require.NoError(t, err)
		assert.Zero(t, n, "samples of an interval shorter than a period")
		assert.Zero(t, mean)
		require.NoError(t, s.Start())
		time.Sleep(150 * time.Millisecond)
		mean, n, err = s.Stop()
		require.NoError(t, err)
		assert.Equal(t, 2, n, "samples of a third interval")
		assert.InDelta(t, (40+100)/2.0, mean, 1e-9)

		require.NoError(t, s.Close())
		require.NoError(t, s.Close())
		assert.Equal(t, 1, closed, "NVML shut down once")
	})
}

func TestSamplerErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := errors.New("gone")
		s := newSampler(50*time.Millisecond, func() ([]float64, error) { return nil, bad }, nil)
		_, _, err := s.Stop()
		assert.Error(t, err, "Stop without Start")
		require.NoError(t, s.Start())
		assert.Error(t, s.Start(), "Start twice")
		time.Sleep(120 * time.Millisecond)
		_, n, err := s.Stop()
		assert.ErrorIs(t, err, bad)
		assert.Zero(t, n)
		require.NoError(t, s.Start())
		require.NoError(t, s.Close(), "Close stops a running interval")
	})
}

func TestPCIString(t *testing.T) {
	assert.Equal(t, "0000:1b:00.0", PCI{Domain: 0, Bus: 0x1b, Device: 0}.String())
	assert.Equal(t, "0001:c3:1f.0", PCI{Domain: 1, Bus: 0xc3, Device: 0x1f}.String())
}

func TestOpenWithoutNVML(t *testing.T) {
	// In builds without the cuda tag Open always fails; with it, an empty
	// list is refused before NVML is touched.
	_, err := Open(nil, 0)
	require.Error(t, err)
}

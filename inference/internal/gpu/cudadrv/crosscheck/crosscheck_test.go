//go:build cuda && gorgonia

package crosscheck

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorgonia.org/cu"

	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
)

// TestAgainstGorgonia asks both bindings the same questions. (Reaching it at
// all means gorgonia.org/cu's init found a driver.)
func TestAgainstGorgonia(t *testing.T) {
	require.NoError(t, cudadrv.Init())
	n, err := cudadrv.DeviceCount()
	require.NoError(t, err)
	want, err := cu.NumDevices()
	require.NoError(t, err)
	assert.Equal(t, want, n, "device count")

	v, err := cudadrv.DriverVersion()
	require.NoError(t, err)
	assert.Equal(t, cu.Version(), v, "driver version")

	attrs := []struct {
		name string
		ours cudadrv.Attribute
		cu   cu.DeviceAttribute
	}{
		{"compute capability major", cudadrv.ComputeCapabilityMajor, cu.ComputeCapabilityMajor},
		{"compute capability minor", cudadrv.ComputeCapabilityMinor, cu.ComputeCapabilityMinor},
		{"PCI domain", cudadrv.PCIDomainID, cu.PciDomainID},
		{"PCI bus", cudadrv.PCIBusID, cu.PciBusID},
		{"PCI device", cudadrv.PCIDeviceID, cu.PciDeviceID},
	}
	for i := range n {
		ours, err := cudadrv.GetDevice(i)
		require.NoError(t, err)
		theirs, err := cu.GetDevice(i)
		require.NoError(t, err)

		name, err := ours.Name()
		require.NoError(t, err)
		wantName, err := theirs.Name()
		require.NoError(t, err)
		assert.Equal(t, wantName, name, "device %d name", i)

		mem, err := ours.TotalMem()
		require.NoError(t, err)
		wantMem, err := theirs.TotalMem()
		require.NoError(t, err)
		assert.Equal(t, wantMem, mem, "device %d memory", i)

		for _, a := range attrs {
			got, err := ours.Attribute(a.ours)
			require.NoError(t, err)
			want, err := theirs.Attribute(a.cu)
			require.NoError(t, err)
			assert.Equal(t, want, got, "device %d %s", i, a.name)
		}
		t.Logf("device %d: %s, %d MiB", i, name, mem>>20)
	}
}

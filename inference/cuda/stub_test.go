//go:build !(cuda && linux && cgo)

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

func TestStubNoGPU(t *testing.T) {
	b := New()
	assert.Equal(t, "cuda", b.Name())
	m, err := resnet.New(resnet.Arch{InChannels: 3, Stem: 4, Widths: []int{4}, Blocks: []int{1}, Classes: 2}, 1)
	require.NoError(t, err)
	_, err = b.Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 1, Height: 32, Width: 32})
	assert.ErrorIs(t, err, backend.ErrNoGPU)
	_, err = Describe()
	assert.ErrorIs(t, err, backend.ErrNoGPU)
}

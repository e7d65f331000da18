//go:build cuda && linux && cgo

package cuda

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// copyIn runs parts through worker 0 and returns the logits and the
// device-timed copy-in.
func copyIn(t *testing.T, e *engine, parts [][]float32, n int) ([]float32, backend.Times) {
	t.Helper()
	times := runTimed(t, e, parts, n)
	return logitsOf(e, n), times
}

// TestRegisterHost page-locks a shared mapping (as the front door does with
// a client's shared-memory region): CopyIn then copies a part inside it
// directly, the logits are those of the staged copy bit for bit, and
// unregistering (or Close) undoes it.
func TestRegisterHost(t *testing.T) {
	requireGPU(t)
	const n, h, w = 8, 250, 250
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	be, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: n, Height: h, Width: w, Precision: backend.FP16, Batches: []int{n}})
	require.NoError(t, err)
	e := be.(*engine)
	defer e.Close()

	values := n * 3 * h * w
	mapping, err := unix.Mmap(-1, 0, 4*values+8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer unix.Munmap(mapping)
	// The tensor starts 64 bytes in, as a tensor offset in a region would.
	view := unsafe.Slice((*float32)(unsafe.Pointer(&mapping[64])), values)
	copy(view, randomInput(n, h, w, 3))

	require.False(t, e.pinned(asBytes(view)), "pageable before RegisterHost")
	staged, tStaged := copyIn(t, e, [][]float32{view}, n)
	unregister, err := e.RegisterHost(mapping)
	require.NoError(t, err)
	assert.True(t, e.pinned(asBytes(view)), "inside registered memory")
	assert.True(t, e.pinned(asBytes(view[values-3*h*w:])), "its last image too")
	direct, tDirect := copyIn(t, e, [][]float32{view}, n)
	assert.Equal(t, staged, direct, "logits of the direct copy")
	t.Logf("copy-in of %d MB, device-timed: staged through pinned memory %v, DMA from the registered mapping %v",
		4*values>>20, tStaged.H2D, tDirect.H2D)

	require.NoError(t, unregister())
	assert.False(t, e.pinned(asBytes(view)), "pageable again after unregister")
	assert.NoError(t, unregister(), "unregister is idempotent")
	again, _ := copyIn(t, e, [][]float32{view}, n)
	assert.Equal(t, staged, again, "staged again after unregister")

	unregister, err = e.RegisterHost(mapping)
	require.NoError(t, err)
	require.NoError(t, e.Close(), "Close unregisters what is left")
	assert.NoError(t, unregister(), "unregister after Close does nothing")
	_, err = e.RegisterHost(nil)
	assert.ErrorContains(t, err, "RegisterHost of no memory")
}

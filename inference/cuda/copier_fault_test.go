//go:build linux

package cuda

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/internal/fault"
)

// TestCopierFaultIsAnError stages a copy from memory whose pages went away
// (a mapping of a file truncated afterwards, as a client's shared-memory
// region whose object shrank): the copier's goroutines must report the fault
// through the group, not crash, and the group must be clean afterwards.
func TestCopierFaultIsAnError(t *testing.T) {
	const n = 4 * chunk // float32 values: split over the goroutines
	f, err := os.Create(filepath.Join(t.TempDir(), "region"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(4*n))
	m, err := syscall.Mmap(int(f.Fd()), 0, 4*n, syscall.PROT_READ, syscall.MAP_SHARED)
	require.NoError(t, err)
	defer syscall.Munmap(m)
	require.NoError(t, f.Truncate(0))
	src := unsafe.Slice((*float32)(unsafe.Pointer(&m[0])), n)

	c := newCopier(4)
	defer c.close()
	var g copyGroup
	dst := make([]float32, n)
	c.copy(dst, src, &g)
	err = g.wait()
	var fe *fault.Error
	require.ErrorAs(t, err, &fe)
	assert.NoError(t, g.wait(), "the error is reported once")

	ok := make([]float32, n)
	c.copy(dst, ok, &g)
	assert.NoError(t, g.wait(), "the copier goes on")
}

//go:build linux

package fault

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shrunkMapping maps a file of n bytes and then truncates it to 0: touching
// the mapping faults (SIGBUS), as a shared-memory region whose client
// shrank its object.
func shrunkMapping(t *testing.T, n int) []byte {
	f, err := os.Create(filepath.Join(t.TempDir(), "obj"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(int64(n)))
	m, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Munmap(m) })
	require.NoError(t, f.Truncate(0))
	return m
}

func TestCopyFromAndIntoLostPagesIsAnError(t *testing.T) {
	m := shrunkMapping(t, 1<<16)
	buf := make([]byte, 1<<16)
	var fe *Error
	err := Copy(buf, m)
	require.ErrorAs(t, err, &fe, "reading")
	assert.NotZero(t, fe.Addr)
	assert.Contains(t, err.Error(), "memory fault at")
	err = Copy(m, buf)
	require.ErrorAs(t, err, &fe, "writing")
	// The goroutine's setting is restored: a later fault would crash again.
	assert.False(t, restoreProbe())
}

func TestGuardPassesOtherPanicsOn(t *testing.T) {
	boom := errors.New("boom")
	assert.PanicsWithValue(t, boom, func() { Guard(func() { panic(boom) }) })
	assert.NoError(t, Guard(func() {}))
}

func TestOfIgnoresOrdinaryValues(t *testing.T) {
	assert.Nil(t, Of("text"))
	assert.Nil(t, Of(errors.New("x")))
}

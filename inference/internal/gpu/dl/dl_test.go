//go:build cuda && linux && cgo

package dl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenSymClose(t *testing.T) {
	lib, err := Open("libnot-there.so.42", "libc.so.6")
	require.NoError(t, err)
	assert.Equal(t, "libc.so.6", lib.Name())
	p, err := lib.Sym("strlen")
	require.NoError(t, err)
	assert.NotNil(t, p)
	_, err = lib.Sym("no_such_symbol_here")
	assert.ErrorContains(t, err, "no_such_symbol_here")
	require.NoError(t, lib.Close())
	require.NoError(t, lib.Close(), "second Close")
	_, err = lib.Sym("strlen")
	assert.Error(t, err, "Sym after Close")
}

func TestOpenMissing(t *testing.T) {
	_, err := Open("libnot-there.so.42", "libnot-there.so")
	require.Error(t, err)
	assert.ErrorContains(t, err, "libnot-there.so.42 or libnot-there.so")
	assert.ErrorContains(t, err, "LD_LIBRARY_PATH")
}

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Pointers as 8 little-endian bytes, then ints as 4, nothing between.
func TestKernelParams(t *testing.T) {
	got := kernelParams([]uintptr{0x0102030405060708, 9}, 0x0a0b0c0d, 1)
	want := []byte{
		8, 7, 6, 5, 4, 3, 2, 1,
		9, 0, 0, 0, 0, 0, 0, 0,
		0x0d, 0x0c, 0x0b, 0x0a,
		1, 0, 0, 0,
	}
	assert.Equal(t, want, got)
	assert.Empty(t, kernelParams(nil))
}

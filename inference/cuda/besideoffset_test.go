package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The shortcut's part of the workspace starts past conv1's, aligned, and
// never overlaps it.
func TestBesideOffset(t *testing.T) {
	for _, tc := range []struct{ ws1, want uintptr }{
		{0, 0}, {1, 256}, {255, 256}, {256, 256}, {257, 512}, {1 << 20, 1 << 20},
	} {
		got := besideOffset(tc.ws1)
		assert.Equal(t, tc.want, got, "besideOffset(%d)", tc.ws1)
		assert.GreaterOrEqual(t, got, tc.ws1)
		assert.Zero(t, got%besideAlign)
	}
}

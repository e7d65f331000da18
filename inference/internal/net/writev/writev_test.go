package writev

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sizes records the size of every Write.
type sizes struct {
	bytes.Buffer
	sizes []int
}

func (w *sizes) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.Buffer.Write(p)
}

// TestToWritesInChunks: To hands the writer at most Chunk bytes at a time,
// across slice boundaries, stops at n and returns what is left.
func TestToWritesInChunks(t *testing.T) {
	old := Chunk
	Chunk = 4
	defer func() { Chunk = old }()
	bufs := [][]byte{[]byte("head"), []byte("0123456"), []byte("789"), []byte("extra")}
	var w sizes
	sent, rest, err := To(&w, bufs, 14)
	require.NoError(t, err)
	assert.Equal(t, int64(14), sent)
	assert.Equal(t, "head0123456789", w.String())
	total := 0
	for _, n := range w.sizes {
		assert.LessOrEqual(t, n, 4, "write sizes %v", w.sizes)
		total += n
	}
	assert.Equal(t, 14, total)
	assert.GreaterOrEqual(t, len(w.sizes), 4, "14 bytes in chunks of 4: at least 4 writes, got %v", w.sizes)
	assert.Equal(t, [][]byte{[]byte("extra")}, rest)
}

// TestToDoesNotAllocatePerChunk: a 64-chunk write allocates as much as a
// one-chunk write.
func TestToDoesNotAllocatePerChunk(t *testing.T) {
	allocs := func(size int) float64 {
		data := make([]byte, size)
		return testing.AllocsPerRun(10, func() {
			_, _, err := To(io.Discard, [][]byte{[]byte("head"), data}, int64(len(data)+4))
			require.NoError(t, err)
		})
	}
	one, many := allocs(int(Chunk)/2), allocs(64*int(Chunk))
	assert.Equal(t, one, many, "allocations of a 1-chunk write (%v) and a 64-chunk write (%v)", one, many)
}

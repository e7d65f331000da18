package bufpool

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/mem"
)

var _ mem.BufferPool = (*Pool)(nil)

func TestGetLengthAndCapacity(t *testing.T) {
	var p Pool
	for _, tc := range []struct{ n, cap int }{
		{0, 256}, {1, 256}, {256, 256}, {257, 512}, {16 << 10, 16 << 10}, {16<<10 + 1, 32 << 10},
		{MaxPooled, MaxPooled}, {MaxPooled + 1, MaxPooled + 1},
	} {
		b := p.Get(tc.n)
		assert.Len(t, *b, tc.n, "Get(%d)", tc.n)
		assert.Equal(t, tc.cap, cap(*b), "Get(%d)", tc.n)
		p.Put(b)
	}
}

// TestReuseKeepsContents checks that a buffer given back comes out again for
// a request of its class, with what it held (the point of the pool), and
// that buffers of other capacities are not taken back.
func TestReuseKeepsContents(t *testing.T) {
	var p Pool
	b := p.Get(1000)
	require.Equal(t, 1024, cap(*b))
	for i := range *b {
		(*b)[i] = 7
	}
	p.Put(b)
	var got *[]byte
	// sync.Pool may drop an item at any time (a GC); try a few times.
	for range 100 {
		got = p.Get(600)
		if got == b {
			break
		}
		p.Put(b)
	}
	if got != b {
		t.Skip("sync.Pool kept nothing across 100 tries (a collection each time?)")
	}
	assert.Len(t, *got, 600)
	assert.Equal(t, byte(7), (*got)[599], "contents are not cleared")

	odd := make([]byte, 300)
	p.Put(&odd) // not a power of two: dropped
	big := make([]byte, 2*MaxPooled)
	p.Put(&big) // too large: dropped
	for range 10 {
		x := p.Get(200) // the class a capacity of 300 would wrongly land in
		assert.NotSame(t, &odd, x)
		assert.Equal(t, 256, cap(*x))
	}
}

package inference

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PollDone sees a closed channel at once, either of the two, and gives up
// on open ones.
func TestPollDone(t *testing.T) {
	done, cancel := make(chan struct{}), make(chan struct{})
	assert.False(t, PollDone(0, done, cancel), "no polling")
	assert.False(t, PollDone(time.Millisecond, done, nil), "open channel, nil channel")
	close(cancel)
	assert.True(t, PollDone(time.Millisecond, done, cancel), "cancel closed")
	close(done)
	assert.True(t, PollDone(time.Millisecond, done, nil), "done closed")
}

// A taker that polls gets the calls pushed before and while it looks, and
// after it gave up and slept; quit ends its look and its sleep.
func TestTakePolls(t *testing.T) {
	q := newRequestQueue(8, Block, func(*Call) {})
	call := func() *Call { return &Call{ctx: context.Background(), done: make(chan struct{})} }

	first := call()
	require.NoError(t, q.push(first))
	got, why := q.take(nil, nil, nil, time.Millisecond)
	assert.Equal(t, took, why)
	assert.Same(t, first, got, "queued before the take")
	assert.EqualValues(t, 0, q.list.size.Load())

	for _, idle := range []time.Duration{0, 50 * time.Microsecond, 5 * time.Millisecond} {
		var wg sync.WaitGroup
		c := call()
		var got *Call
		wg.Go(func() { got, _ = q.take(nil, nil, nil, idle) })
		require.NoError(t, q.push(c))
		wg.Wait()
		assert.Same(t, c, got, "pushed while taking, idle %v", idle)
	}

	quit := make(chan struct{})
	close(quit)
	got, why = q.take(quit, nil, nil, 5*time.Millisecond)
	assert.Nil(t, got)
	assert.Equal(t, quitting, why)
}

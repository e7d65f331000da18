package h2grpc

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCallWorkers checks that calls one after another reuse one goroutine,
// that calls at once each get a goroutine (none waits for another), and
// that idle workers exit when the server stops.
func TestCallWorkers(t *testing.T) {
	done := make(chan struct{})
	w := newCallWorkers(done)
	before := runtime.NumGoroutine()

	ran := make(chan struct{})
	for range 50 {
		w.run(func() { ran <- struct{}{} })
		<-ran
		// Let the worker reach its select before the next call.
		waitFor(t, func() bool { return runtime.NumGoroutine() <= before+1 })
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before+1, "sequential calls kept one worker")

	const n = 8
	var started, release sync.WaitGroup
	started.Add(n)
	release.Add(1)
	for range n {
		w.run(func() { started.Done(); release.Wait() })
	}
	started.Wait() // would block if a call waited for a busy worker
	release.Done()

	close(done)
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "idle workers exit when the server stops")
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	require.True(t, cond(), "condition not met in 5 s")
}

package client_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/client"
)

func TestBalancerPicksTheLeastOutstanding(t *testing.T) {
	// Each step acquires (a server number is expected) or releases a call
	// acquired earlier (by its step index).
	type step struct {
		release int // index of the acquiring step to release; -1: acquire
		want    int // acquire: the server expected
	}
	acq := func(want int) step { return step{release: -1, want: want} }
	rel := func(i int) step { return step{release: i} }
	for _, tc := range []struct {
		name    string
		servers int
		steps   []step
		left    []int
	}{
		{"one server", 1, []step{acq(0), acq(0), rel(0)}, []int{1}},
		{"idle servers take turns", 3, []step{acq(0), rel(0), acq(1), rel(2), acq(2), rel(4), acq(0)}, []int{1, 0, 0}},
		{"ties round robin under load", 3, []step{acq(0), acq(1), acq(2), acq(0), acq(1)}, []int{2, 2, 1}},
		{"a freed server is picked first", 3, []step{acq(0), acq(1), acq(2), rel(1), acq(1), rel(0), acq(0)}, []int{1, 1, 1}},
		{"the least loaded, wherever the turn is", 2, []step{acq(0), acq(1), acq(0), rel(1), acq(1), acq(1)}, []int{2, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := client.NewBalancer(tc.servers)
			require.NoError(t, err)
			releases := map[int]func(){}
			for i, s := range tc.steps {
				if s.release >= 0 {
					releases[s.release]()
					continue
				}
				got, release := b.Acquire()
				assert.Equal(t, s.want, got, "step %d", i)
				releases[i] = release
			}
			assert.Equal(t, tc.left, b.Outstanding())
		})
	}
	_, err := client.NewBalancer(0)
	assert.ErrorContains(t, err, "a balancer over 0 servers")
}

func TestBalancerReleaseCountsOnce(t *testing.T) {
	b, err := client.NewBalancer(2)
	require.NoError(t, err)
	_, release := b.Acquire()
	b.Acquire()
	release()
	release()
	assert.Equal(t, []int{0, 1}, b.Outstanding())
}

// TestBalancerSendsMoreToTheFasterServer drives two simulated servers, one
// answering in 1 ms and one in 4 ms (each one call at a time, in order),
// with 4 callers that each keep one call outstanding: least outstanding
// requests sends the fast one about four times as many calls, where round
// robin would send both the same number.
func TestBalancerSendsMoreToTheFasterServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := client.NewBalancer(2)
		require.NoError(t, err)
		service := []time.Duration{4 * time.Millisecond, time.Millisecond}
		busy := []chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
		var mu sync.Mutex
		calls := make([]int, 2)
		end := time.Now().Add(time.Second)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(end) {
					s, release := b.Acquire()
					busy[s] <- struct{}{}
					time.Sleep(service[s])
					<-busy[s]
					release()
					mu.Lock()
					calls[s]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		assert.Equal(t, []int{0, 0}, b.Outstanding())
		t.Logf("calls: slow %d, fast %d", calls[0], calls[1])
		assert.Greater(t, calls[1], 3*calls[0], "the fast server takes more than three times the slow one's calls")
		assert.Positive(t, calls[0], "the slow server still takes calls")
	})
}

package loadgen

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// queueTarget is one server with a fixed service time: request i completes at
// max(its arrival, the previous completion) + service.
type queueTarget struct {
	service time.Duration
	mu      sync.Mutex
	last    time.Time
}

func (q *queueTarget) Send(ctx context.Context, at time.Time) (func() error, error) {
	q.mu.Lock()
	done := time.Now()
	if q.last.After(done) {
		done = q.last
	}
	done = done.Add(q.service)
	q.last = done
	q.mu.Unlock()
	return func() error {
		time.Sleep(time.Until(done))
		return nil
	}, nil
}

func TestSearchCapacityFindsTheKnee(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 1 ms of service: at most 1000 req/s; with Poisson arrivals the p99
		// stays within 10 ms up to roughly 80-90 % load.
		q := &queueTarget{service: time.Millisecond}
		c, err := SearchCapacity(context.Background(), q, CapacitySpec{Start: 100, Trial: 2 * time.Second, Seed: 1})
		require.NoError(t, err)
		assert.Greater(t, c.Rate, 600.0)
		assert.Less(t, c.Rate, 1000.0)
		var sawFail bool
		for _, tr := range c.Trials {
			if tr.Rate <= c.Rate {
				assert.True(t, tr.OK, "trial at %.0f req/s is not above the capacity but missed", tr.Rate)
			}
			sawFail = sawFail || !tr.OK
			assert.LessOrEqual(t, tr.P50, tr.Quantile)
		}
		assert.True(t, sawFail, "the search must have seen a rate that misses the SLO")
		// Repeating the search with the same seed gives the same figure.
		q2 := &queueTarget{service: time.Millisecond}
		c2, err := SearchCapacity(context.Background(), q2, CapacitySpec{Start: 100, Trial: 2 * time.Second, Seed: 1})
		require.NoError(t, err)
		assert.Equal(t, c.Rate, c2.Rate)
	})
}

func TestSearchCapacityNoRateMeetsSLO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := &queueTarget{service: 20 * time.Millisecond}
		c, err := SearchCapacity(context.Background(), q, CapacitySpec{Start: 10, MinRequests: 20})
		require.NoError(t, err)
		assert.Zero(t, c.Rate)
		require.Len(t, c.Trials, 1)
		assert.False(t, c.Trials[0].OK)
	})
}

func TestSearchCapacityRejectsBadSpec(t *testing.T) {
	_, err := SearchCapacity(context.Background(), &queueTarget{}, CapacitySpec{Quantile: 2})
	assert.Error(t, err)
}

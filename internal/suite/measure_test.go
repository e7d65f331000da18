package suite

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/loadgen"
	"github.com/inferbench/inferbench/inference/metrics"
)

func TestBurstThroughputAndLatencyOnAKnownSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// One serial worker, 2 ms a batch: after the warm-up, the k-th of 10
		// requests sent at once is answered at 2k ms.
		sc := &scripted{compute: func(int) time.Duration { return 2 * time.Millisecond }}
		s := scriptedServer(t, sc, inference.Config{Options: inference.Options{Workers: 1}})
		defer s.Close()
		in := inference.NewInput(4, 32, 32)
		res, err := loadgen.Run(context.Background(), serverTarget{s: s, in: in}, loadgen.Spec{Mode: loadgen.Burst, Warmup: true}, 10)
		require.NoError(t, err)
		assert.Equal(t, 10, res.Completed)
		assert.Zero(t, res.Failed)
		assert.Equal(t, 2*time.Millisecond, res.Warmup)
		assert.Equal(t, 20*time.Millisecond, res.Elapsed())
		assert.Equal(t, 2000.0, res.Throughput(4), "40 images in 20 ms")
		lat := res.Latency.Summary()
		assert.Equal(t, 2*time.Millisecond, lat.Min)
		assert.Equal(t, 20*time.Millisecond, lat.Max)
		assert.Equal(t, 11*time.Millisecond, lat.Mean, "mean of 2, 4, ..., 20 ms")
		st := s.Stats()
		assert.Equal(t, uint64(11), st.Completed, "10 and the warm-up request")
		assert.Equal(t, 2*time.Millisecond, st.Stages[metrics.Compute].Mean())
		assert.Equal(t, 4.0, st.MeanBatch())
	})
}

// TestPollingTargetIsAnswered: an in-process caller that looks for its answer
// (-client-poll) gets it whether the answer comes while it looks or after it
// gave up and slept, with and without the request log. Real time: a bubble's
// clock stands still while the caller looks.
func TestPollingTargetIsAnswered(t *testing.T) {
	for _, tc := range []struct {
		name    string
		compute time.Duration
		poll    time.Duration
		log     bool
	}{
		{"answered while looking", 0, 10 * time.Millisecond, false},
		{"answered after sleeping", 3 * time.Millisecond, 50 * time.Microsecond, false},
		{"logged", 3 * time.Millisecond, 50 * time.Microsecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &scripted{compute: func(int) time.Duration { return tc.compute }}
			s := scriptedServer(t, sc, inference.Config{Options: inference.Options{Workers: 1}})
			defer s.Close()
			target := serverTarget{s: s, in: inference.NewInput(1, 32, 32), poll: tc.poll}
			if tc.log {
				target.log = &requestLog{}
			}
			res, err := loadgen.Run(context.Background(), target, loadgen.Spec{Mode: loadgen.Closed, Concurrency: 2}, 8)
			require.NoError(t, err)
			assert.Equal(t, 8, res.Completed)
			assert.Zero(t, res.Failed)
			if tc.log {
				assert.Len(t, target.log.recs, 8)
				for _, r := range target.log.recs {
					assert.NoError(t, r.err)
					assert.False(t, r.timing.Sent.IsZero())
				}
			}
		})
	}
}

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

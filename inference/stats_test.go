package inference_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/metrics"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
)

// TestStatsAreCumulativeAndDifferenced drives a back-end whose compute takes a
// known time (synctest's clock, so every duration is exact) with a known
// schedule, and checks the cumulative figures and an interval's (Stats.Sub)
// against what the schedule implies (issue 18, item 8).
func TestStatsAreCumulativeAndDifferenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &faulty{}
		s := faultyServer(t, f, inference.Config{Options: inference.Options{MaxBatch: 4}})
		infer := func(n int) {
			_, err := s.Infer(context.Background(), inference.NewInput(n, 32, 32))
			require.NoError(t, err)
		}
		f.computeTime.Store(int64(time.Millisecond))
		for range 5 {
			infer(1) // one at a time: no queueing, latency = compute = 1 ms
		}
		before := s.Stats()
		f.computeTime.Store(int64(3 * time.Millisecond))
		for range 10 {
			infer(2)
		}
		// Two at once on one worker: the second waits 3 ms in the queue.
		a, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
		require.NoError(t, err)
		b, err := s.Submit(context.Background(), inference.Request{Input: inference.NewInput(1, 32, 32)})
		require.NoError(t, err)
		require.NoError(t, a.Err())
		require.NoError(t, b.Err())
		after := s.Stats()

		assert.Equal(t, uint64(5), before.Completed)
		assert.Equal(t, uint64(5), before.Latency.Count)
		assert.Equal(t, 5*time.Millisecond, before.Latency.Sum)
		assert.Equal(t, metrics.StageStats{Count: 5, Sum: 5 * time.Millisecond}, before.Stages[metrics.Compute])
		assert.Equal(t, metrics.StageStats{Count: 5}, before.Stages[metrics.Queue])
		assert.Equal(t, 1.0, before.MeanBatch())

		run := after.Sub(before)
		tests := []struct {
			name      string
			got, want any
		}{
			{"Accepted", run.Accepted, uint64(12)},
			{"Completed", run.Completed, uint64(12)},
			{"Latency.Count", run.Latency.Count, uint64(12)},
			{"Latency.Sum", run.Latency.Sum, (10*3 + 3 + 6) * time.Millisecond},
			{"Compute", run.Stages[metrics.Compute], metrics.StageStats{Count: 12, Sum: 36 * time.Millisecond}},
			{"Queue", run.Stages[metrics.Queue], metrics.StageStats{Count: 12, Sum: 3 * time.Millisecond}},
			{"CopyIn", run.Stages[metrics.CopyIn], metrics.StageStats{Count: 12}},
			{"Batches", run.Batches, uint64(12)},
			{"Items", run.Items, uint64(22)},
			{"at or below 2.5 ms", run.Latency.CountAtOrBelow(2500 * time.Microsecond), uint64(0)},
			{"at or below 4 ms", run.Latency.CountAtOrBelow(4 * time.Millisecond), uint64(11)},
			{"at or below 1 s", run.Latency.CountAtOrBelow(time.Second), uint64(12)},
			{"all at or below 2.5 ms", after.Latency.CountAtOrBelow(2500 * time.Microsecond), uint64(5)},
		}
		for _, tt := range tests {
			assert.Equal(t, tt.want, tt.got, tt.name)
		}
		assert.InEpsilon(t, float64(3*time.Millisecond), float64(run.Latency.Quantile(0.5)), metrics.RelativeError)
		assert.InEpsilon(t, float64(6*time.Millisecond), float64(run.Latency.Quantile(1)), metrics.RelativeError)
		assert.InEpsilon(t, 22.0/12, run.MeanBatch(), 1e-12)
		assert.Equal(t, after.Completed, before.Completed+run.Completed, "figures only grow")
	})
}

// TestStatsUnderConcurrentCompletions checks the sharded figures add up when
// several workers complete requests while Stats is read.
func TestStatsUnderConcurrentCompletions(t *testing.T) {
	s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 4, Workers: 3, Pipeline: inference.Overlap}, Backend: nop.New(), Model: tinyModel(t)})
	require.NoError(t, err)
	defer s.Close()
	const clients, each = 4, 300
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() { // a reader that checks monotonicity while requests complete
		defer close(readerDone)
		prev := s.Stats()
		for {
			select {
			case <-stop:
				return
			default:
			}
			st := s.Stats()
			assert.GreaterOrEqual(t, st.Completed, prev.Completed)
			assert.GreaterOrEqual(t, st.Latency.Sum, prev.Latency.Sum)
			prev = st
		}
	}()
	done := make(chan struct{})
	for c := range clients {
		go func() {
			defer func() { done <- struct{}{} }()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for range each {
				_, err := s.Infer(context.Background(), inference.NewInput(1+rng.IntN(4), 32, 32))
				assert.NoError(t, err)
			}
		}()
	}
	for range clients {
		<-done
	}
	close(stop)
	<-readerDone
	st := s.Stats()
	assert.Equal(t, uint64(clients*each), st.Completed)
	assert.Equal(t, st.Completed, st.Latency.Count)
	for _, stage := range st.Stages {
		assert.Equal(t, st.Completed, stage.Count)
	}
	assert.Equal(t, st.Completed, st.Batches, "no batching: one batch per request")
}

// TestArchIsBuiltAndTimed: Config.Arch and Seed let New build the model, and
// Warmup.Load times the building (issue 18, item 3).
func TestArchIsBuiltAndTimed(t *testing.T) {
	s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 2}, Arch: resnet.Tiny(), Seed: 3})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, 5, s.Classes())
	assert.Positive(t, s.Warmup().Load, "building the model is timed")

	m, err := resnet.New(resnet.Tiny(), 3)
	require.NoError(t, err)
	in := inference.NewInput(2, 32, 32)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range in.Data {
		in.Data[i] = float32(rng.NormFloat64())
	}
	want, err := m.Reference(in.Data, 2, 32, 32)
	require.NoError(t, err)
	resp, err := s.Infer(context.Background(), in)
	require.NoError(t, err)
	for i, w := range want {
		assert.InDelta(t, w, float64(resp.Logits.Data[i]), 1e-4, "logit %d of the seeded Tiny network", i)
	}

	// The zero Arch is ResNet-18; a given Model leaves Arch alone.
	s2, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 1}, Backend: nop.New()})
	require.NoError(t, err)
	defer s2.Close()
	assert.Equal(t, resnet.ResNet18(), s2.Config().Arch)
	assert.Equal(t, 1000, s2.Classes())
}

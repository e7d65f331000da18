package metrics_test

import (
	"fmt"
	"time"

	"github.com/inferbench/inferbench/inference/metrics"
)

func ExampleHistogram() {
	var h metrics.Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	s := h.Summary()
	fmt.Println("count", s.Count, "min", s.Min, "max", s.Max, "mean", s.Mean)
	// Exact: 500µs and 990µs; the histogram is within 1/256 of them.
	fmt.Println("p50", s.P50.Round(time.Microsecond), "p99", s.P99.Round(time.Microsecond))
	// Output:
	// count 1000 min 1µs max 1ms mean 500.5µs
	// p50 501µs p99 989µs
}

func ExampleRecorder() {
	r := metrics.NewRecorder(2) // one shard per goroutine that observes
	r.Shard(0).Observe(3*time.Millisecond, [metrics.NumStages]time.Duration{metrics.Queue: time.Millisecond, metrics.Compute: 2 * time.Millisecond})
	before := r.Snapshot()
	r.Shard(1).Observe(5*time.Millisecond, [metrics.NumStages]time.Duration{metrics.Queue: 2 * time.Millisecond, metrics.Compute: 3 * time.Millisecond})

	// The figures only grow; an interval's are the difference of two snapshots.
	s := r.Snapshot().Sub(before)
	fmt.Println("requests", s.Latency.Count, "latency", s.Latency.Sum)
	for st := range metrics.Stage(metrics.NumStages) {
		fmt.Printf("%s-ns %d\n", st, s.Stages[st].Mean().Nanoseconds())
	}
	// Output:
	// requests 1 latency 5ms
	// queue-ns 2000000
	// h2d-ns 0
	// compute-ns 3000000
	// d2h-ns 0
}

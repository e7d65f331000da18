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
	var r metrics.Recorder // shared by every worker goroutine
	r.Observe(3 * time.Millisecond)
	r.ObserveStage(metrics.Queue, time.Millisecond)
	r.ObserveStage(metrics.Compute, 2*time.Millisecond)

	s := r.Snapshot()
	for st := range metrics.Stage(metrics.NumStages) {
		fmt.Printf("%s-ns %d\n", st, s.Stages[st].Mean.Nanoseconds())
	}
	// Output:
	// queue-ns 1000000
	// h2d-ns 0
	// compute-ns 2000000
	// d2h-ns 0
}

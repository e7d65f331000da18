package cpu

import (
	"testing"

	"github.com/inferbench/inferbench/inference/backend"
)

// BenchmarkForwardLayers is BenchmarkForward with the pass cut into its
// steps: each step's host time (Go's monotonic clock, from the end of the
// previous step to its own end, so the steps add up to the pass) is
// reported as STEP-us, the mean over the timed passes in microseconds, and
// its share of the pass as STEP-pct. To be timed apart, each step runs as a
// job of its own, as with cpuBackend.serial: the steps do not overlap, so
// its images/s is that of such a pass, not BenchmarkForward's. It takes
// -batches like BenchmarkForward; set the threads with GOMAXPROCS.
func BenchmarkForwardLayers(b *testing.B) {
	forEachForwardBatch(b, func(b *testing.B, e backend.Engine, batch int, parts [][]float32, _ bool) {
		wk := e.Workers()[0].(*worker)
		names := wk.net.steps()
		wk.scratch.laps = make([]int64, len(names))
		passes := 0
		for b.Loop() {
			if err := wk.CopyIn(0, parts); err != nil {
				b.Fatal(err)
			}
			if err := wk.Compute(0, batch); err != nil {
				b.Fatal(err)
			}
			passes++
		}
		var total int64
		for _, ns := range wk.scratch.laps {
			total += ns
		}
		for i, ns := range wk.scratch.laps {
			b.ReportMetric(float64(ns)/float64(passes)/1e3, names[i]+"-us")
			b.ReportMetric(100*float64(ns)/float64(total), names[i]+"-pct")
		}
		b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "images/s")
	})
}

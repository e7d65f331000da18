package cpu

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// BenchmarkForwardLayers is BenchmarkForward with the pass cut into its
// steps: each step's host time (Go's monotonic clock, from the end of the
// previous step to its own end, so the steps add up to the pass) is
// reported as STEP-us, the mean over the timed passes in microseconds, and
// its share of the pass as STEP-pct. It takes -batches like
// BenchmarkForward; set the threads with GOMAXPROCS.
func BenchmarkForwardLayers(b *testing.B) {
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(b, err)
	const h, w = 250, 250
	batches, err := parseBatches(*forwardBatches)
	require.NoError(b, err, "-batches")
	for _, batch := range batches {
		b.Run(fmt.Sprintf("backend=cpu/threads=%d/batch=%d", runtime.GOMAXPROCS(0), batch), func(b *testing.B) {
			e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: batch, Height: h, Width: w})
			require.NoError(b, err)
			defer e.Close()
			wk := e.Workers()[0].(*worker)
			parts := [][]float32{randImages(batch, 3, h, w, 1)}
			require.NoError(b, wk.CopyIn(0, parts))
			require.NoError(b, wk.Compute(0, batch))
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
}

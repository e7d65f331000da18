//go:build cuda

package cuda

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// BenchmarkWorker drives one Worker directly with ResNet-18 at 250x250: fp32
// input in host memory (pageable, or pinned from AllocHost), copies included.
// Serial keeps one batch in flight; Overlap keeps three slots in flight from one
// goroutine (the stages are asynchronous, so copies of one batch overlap the
// compute of another).
func BenchmarkWorker(b *testing.B) {
	requireGPU(b)
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(b, err)
	for _, prec := range []backend.Precision{backend.FP32, backend.TF32} {
		for _, pipe := range []backend.Pipeline{backend.Serial, backend.Overlap} {
			for _, batch := range []int{1, 32, 256} {
				for _, input := range []string{"pageable", "pinned"} {
					name := fmt.Sprintf("precision=%s/pipeline=%s/batch=%d/input=%s", prec, pipe, batch, input)
					b.Run(name, func(b *testing.B) { benchWorker(b, m, prec, pipe, batch, input == "pinned") })
				}
			}
		}
	}
}

func benchWorker(b *testing.B, m *resnet.Model, prec backend.Precision, pipe backend.Pipeline, batch int, pinned bool) {
	slots := 1
	if pipe == backend.Overlap {
		slots = 3
	}
	t0 := time.Now()
	e, err := New().Open(m, backend.Options{Workers: 1, Slots: slots, MaxBatch: batch, Height: 250, Width: 250,
		Pipeline: pipe, Precision: prec, Batches: []int{batch}})
	require.NoError(b, err)
	warm := time.Since(t0)
	defer e.Close()
	inputs := make([][]float32, slots)
	for i := range inputs {
		x := randomInput(batch, 250, 250, uint64(i))
		if pinned {
			p, err := e.(backend.Allocator).AllocHost(len(x))
			require.NoError(b, err)
			copy(p, x)
			x = p
		}
		inputs[i] = x
	}
	w := e.Workers()[0]
	release := w.Bind()
	defer release()
	var compute, h2d time.Duration
	waits := 0
	wait := func(slot int) {
		t, err := w.Wait(slot)
		require.NoError(b, err)
		compute += t.Compute
		h2d += t.H2D
		waits++
	}
	s := e.Sampler()
	require.NoError(b, s.Start())
	i := 0
	start := time.Now()
	for b.Loop() {
		slot := i % slots
		if i >= slots {
			wait(slot)
		}
		require.NoError(b, w.CopyIn(slot, [][]float32{inputs[slot]}))
		require.NoError(b, w.Compute(slot, batch))
		require.NoError(b, w.CopyOut(slot, batch))
		i++
	}
	for j := max(0, i-slots); j < i; j++ {
		wait(j % slots)
	}
	elapsed := time.Since(start)
	u, err := s.Stop()
	require.NoError(b, err)
	b.ReportMetric(float64(i*batch)/elapsed.Seconds(), "images/s")
	b.ReportMetric(float64(compute.Nanoseconds())/float64(waits), "compute-ns")
	b.ReportMetric(float64(h2d.Nanoseconds())/float64(waits), "h2d-ns")
	b.ReportMetric(u.Percent, "gpu-util-pct")
	b.ReportMetric(u.Busy, "busy-pct")
	b.ReportMetric(float64(warm.Nanoseconds()), "warmup-ns")
}

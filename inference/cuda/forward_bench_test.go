//go:build cuda && linux && cgo

package cuda

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// BenchmarkForward measures the forward pass alone, as scripts/pytorch_bench.py
// measures PyTorch's (its BenchmarkForward lines): the batch is copied to the
// GPU once, then each iteration runs the forward pass (one CUDA graph replay,
// the input's conversion included) and waits for it on the host. The logits'
// copy to the host (4 KB an image) is the one step PyTorch's loop does not
// have. ns/op and samples/s are host wall time; compute-ns is the device's
// time of the pass (events on the compute stream), averaged.
func BenchmarkForward(b *testing.B) {
	requireGPU(b)
	// Config lines, so that the file names its GPU as the suite's files do.
	kv, err := Describe()
	require.NoError(b, err)
	for _, l := range kv {
		fmt.Printf("%s: %s\n", l.Key, l.Value)
	}
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(b, err)
	for _, batch := range []int{1, 32, 256} {
		for _, u8 := range []bool{false, true} {
			dt := "fp32"
			if u8 {
				dt = "uint8"
			}
			b.Run(fmt.Sprintf("precision=fp16/graphs=on/batch=%d/datatype=%s", batch, dt), func(b *testing.B) {
				benchForward(b, m, batch, u8)
			})
		}
	}
}

func benchForward(b *testing.B, m *resnet.Model, batch int, u8 bool) {
	e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: batch, Height: 250, Width: 250,
		Pipeline: backend.Serial, Precision: backend.FP16, Graphs: true, Batches: []int{batch}})
	require.NoError(b, err)
	defer e.Close()
	w := e.Workers()[0]
	release, err := w.Bind()
	require.NoError(b, err)
	defer release()
	x := randomInput(batch, 250, 250, 1)
	p, err := e.(backend.Allocator).AllocHost(len(x))
	require.NoError(b, err)
	defer e.(backend.Allocator).FreeHost(p)
	if u8 {
		require.NoError(b, w.(backend.Uint8Worker).CopyInUint8(0, [][]uint8{append(asBytes(p)[:0], randomBytes(batch, 250, 250, 1)...)}))
	} else {
		copy(p, x)
		require.NoError(b, w.CopyIn(0, [][]float32{p}))
	}
	pass := func() time.Duration {
		require.NoError(b, w.Compute(0, batch))
		require.NoError(b, w.CopyOut(0, batch))
		t, err := w.Wait(0)
		require.NoError(b, err)
		return t.Compute
	}
	pass() // the copy-in's wait, and a first replay
	var compute time.Duration
	n := 0
	for b.Loop() {
		compute += pass()
		n++
	}
	b.ReportMetric(float64(compute.Nanoseconds())/float64(n), "compute-ns")
	b.ReportMetric(float64(batch*n)/b.Elapsed().Seconds(), "samples/s")
}

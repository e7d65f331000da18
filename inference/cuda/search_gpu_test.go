//go:build cuda && linux && cgo

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/switches"
	"github.com/inferbench/inferbench/inference/resnet"
)

// TestExhaustiveSearchAgrees opens the FP16 network with the exhaustive
// search (Find's ranking, its first algorithms timed as called) and the
// quick one at batches 1 and 8: the config line says which ran, and the
// logits agree within FP16's tolerance. It logs each search's forward pass
// (device time, worker.timeForward), which at batch 1 differed 1.4x before
// the exhaustive search timed its algorithms as called.
func TestExhaustiveSearchAgrees(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 7)
	require.NoError(t, err)
	batches := []int{1, 8}
	logits := map[string]map[int][]float32{}
	for _, s := range []string{"quick", "exhaustive"} {
		t.Setenv(switches.CUDNNSearch.Name, s)
		e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 8, Height: 250, Width: 250,
			Precision: backend.FP16, Batches: batches, AlgoCache: "off"})
		require.NoError(t, err)
		line := configValue(e.Info().Config, "cudnn-search")
		assert.Contains(t, line, s, "cudnn-search")
		logits[s] = map[int][]float32{}
		for _, n := range batches {
			logits[s][n] = run(t, e, [][]float32{randomInput(n, 250, 250, uint64(20+n))}, n)
			d, err := e.(*engine).workers[0].timeForward(e.(*engine).plans.prepared(n))
			require.NoError(t, err)
			t.Logf("%s search, batch %d: forward pass %v (device time)", s, n, d)
		}
		require.NoError(t, e.Close())
	}
	for _, n := range batches {
		rel, scale, agree := agreement(logits["exhaustive"][n], logits["quick"][n], m.Arch.Classes)
		t.Logf("batch %d: top-1 %d/%d, max abs error %.3g = %.3g x max|logit|", n, agree, n, rel*scale, rel)
		assert.LessOrEqual(t, rel, tolerance(backend.FP16), "batch %d: relative error", n)
	}
}

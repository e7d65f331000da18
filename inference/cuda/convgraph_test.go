//go:build cuda && linux && cgo

package cuda

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// TestConvPathsAgree checks that graph convolutions (cuDNN's backend API) give
// the legacy path's logits: at batch 32 and 250x250, top-1 agreement of at
// least 99 % and a relative error within the precision's tolerance; for FP16,
// that some convolutions really ran as backend-API plans.
func TestConvPathsAgree(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 7)
	require.NoError(t, err)
	const n = 32
	x := randomInput(n, 250, 250, 13)
	for _, prec := range precisions {
		t.Run(prec.String(), func(t *testing.T) {
			logits := map[backend.Convs][]float32{}
			for _, convs := range []backend.Convs{backend.ConvsLegacy, backend.ConvsGraph} {
				e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: n, Height: 250, Width: 250,
					Precision: prec, Convs: convs, Batches: []int{n}, AlgoCache: "off"})
				require.NoError(t, err)
				line := configValue(e.Info().Config, "cuda-convs")
				t.Logf("%s: cuda-convs: %s", convs, line)
				if convs == backend.ConvsGraph && prec == backend.FP16 {
					assert.NotContains(t, line, "(0 of", "no convolution ran as a backend-API plan")
				}
				logits[convs] = run(t, e, [][]float32{x}, n)
				require.NoError(t, e.Close())
			}
			rel, scale, agree := agreement(logits[backend.ConvsGraph], logits[backend.ConvsLegacy], m.Arch.Classes)
			t.Logf("graph vs legacy, %s, %d images: top-1 %d/%d, max abs error %.3g = %.3g x max|logit|", prec, n, agree, n, rel*scale, rel)
			assert.GreaterOrEqual(t, float64(agree)/n, 0.99, "top-1 agreement")
			assert.LessOrEqual(t, rel, tolerance(prec), "relative error")
		})
	}
}

// TestConvTimings measures, for FP16 at batches 32 and 256 (250x250), every
// distinct convolution as the legacy call and as the fastest backend-API plan
// (device time per call, CUDA events, mean of graphReps runs after one), and
// the whole forward pass with either path (worker.timeForward: device time
// from the compute stream's first to last event, the host's enqueueing held
// back by a gate, median of 5; no copies). It writes a Markdown table to the
// file named by INFERBENCH_CONV_TIMINGS, if set. It checks that at least one
// convolution has a backend-API plan that ran.
func TestConvTimings(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(t, err)
	gpu := "unknown"
	if kv, err := Describe(); err == nil {
		gpu = configValue(kv, "gpu")
	}
	batches := []int{32, 256}
	var b strings.Builder
	fmt.Fprintf(&b, "GPU: %s; cuDNN %s; ResNet-18 fp16 NHWC at 250x250\n\n", gpu, cudnnVersion(t))
	forward := map[backend.Convs]map[int]time.Duration{}
	for _, convs := range []backend.Convs{backend.ConvsLegacy, backend.ConvsGraph} {
		t0 := time.Now()
		eng, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 256, Height: 250, Width: 250,
			Precision: backend.FP16, Convs: convs, Batches: batches, AlgoCache: "off"})
		require.NoError(t, err)
		open := time.Since(t0)
		e := eng.(*engine)
		forward[convs] = map[int]time.Duration{}
		for _, n := range batches {
			d, err := e.workers[0].timeForward(e.plans.prepared(n))
			require.NoError(t, err)
			forward[convs][n] = d
		}
		fmt.Fprintf(&b, "convs=%s: Open took %s (cold, no algorithm cache); %s\n\n", convs, open.Round(time.Millisecond),
			configValue(e.Info().Config, "cuda-convs"))
		if convs == backend.ConvsGraph {
			timings := e.plans.graphTimings()
			ran := 0
			b.WriteString("| batch | conv | shape (in->out, k/stride, input HxW) | relu | residual | legacy ms | best graph ms | engine | rank | runtime-compiled | chosen |\n")
			b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
			sum := map[int][2]float64{}
			for _, tm := range timings {
				l := e.net.convs[tm.layer]
				g := "-"
				if tm.graph >= 0 {
					g = fmt.Sprintf("%.4f", tm.graph)
					ran++
				}
				fmt.Fprintf(&b, "| %d | %d | %d->%d, %dx%d/%d, %dx%d | %v | %v | %.4f | %s | %d | %d | %v | %s |\n",
					tm.n, tm.layer, l.in, l.out, l.k, l.k, l.stride, l.inH, l.inW, l.relu, l.residual,
					tm.legacy, g, tm.engine, tm.rank, tm.compiled, tm.chosen)
			}
			// Sums over all 20 convolutions of a pass: a problem measured once
			// counts for every layer that has it.
			for _, n := range batches {
				p := e.plans.prepared(n)
				var leg, best float64
				for _, l := range e.net.convs {
					for _, tm := range timings {
						if tm.n == n && fusedSpec(e.net, e.net.convs[tm.layer], n) == fusedSpec(e.net, l, n) {
							leg += tm.legacy
							if p.convs[l.index].graph != nil {
								best += tm.graph
							} else {
								best += tm.legacy
							}
							break
						}
					}
				}
				sum[n] = [2]float64{leg, best}
			}
			b.WriteString("\nSum over the 20 convolutions of one pass (per-call device times above):\n\n| batch | legacy ms | chosen (graph where faster) ms |\n|---|---|---|\n")
			for _, n := range batches {
				fmt.Fprintf(&b, "| %d | %.3f | %.3f |\n", n, sum[n][0], sum[n][1])
			}
			b.WriteString("\n")
			assert.Positive(t, ran, "no backend-API plan ran")
		}
		require.NoError(t, e.Close())
	}
	b.WriteString("Whole forward pass (device time, median of 5, no copies):\n\n| batch | legacy ms | graph ms |\n|---|---|---|\n")
	for _, n := range batches {
		fmt.Fprintf(&b, "| %d | %.3f | %.3f |\n", n, ms(forward[backend.ConvsLegacy][n]), ms(forward[backend.ConvsGraph][n]))
	}
	t.Log("\n" + b.String())
	if path := os.Getenv("INFERBENCH_CONV_TIMINGS"); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func cudnnVersion(t *testing.T) string {
	kv, err := Describe()
	if err != nil {
		return "unknown"
	}
	return configValue(kv, "cudnn")
}

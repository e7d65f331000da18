package cpu

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/cpu/gemm"
	"github.com/inferbench/inferbench/inference/internal/switches"
	"github.com/inferbench/inferbench/inference/resnet"
)

// perturb gives m non-trivial batch-norm statistics, so that folding matters.
func perturb(m *resnet.Model, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	bn := func(b *resnet.BatchNorm) {
		for i := range b.Gamma {
			b.Gamma[i] = float32(0.5 + rng.Float64())
			b.Beta[i] = float32(0.1 * rng.NormFloat64())
			b.Mean[i] = float32(0.1 * rng.NormFloat64())
			b.Var[i] = float32(0.5 + 1.5*rng.Float64())
		}
	}
	bn(&m.StemBN)
	for _, b := range m.Blocks() {
		bn(&b.BN1)
		bn(&b.BN2)
		if b.DownBN != nil {
			bn(b.DownBN)
		}
	}
}

func randImages(n, c, h, w int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n*c*h*w)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func TestForwardMatchesReference(t *testing.T) {
	cases := []struct {
		name   string
		arch   resnet.Arch
		batch  int
		h, w   int
		kernel string
		plan   cpuBackend // the plan's test fields; zero for the default rule
	}{
		{"small", resnet.Arch{InChannels: 3, Stem: 8, Widths: []int{8, 16}, Blocks: []int{1, 2}, Classes: 10}, 3, 40, 52, "", cpuBackend{}},
		{"small-generic", resnet.Arch{InChannels: 3, Stem: 8, Widths: []int{8, 16}, Blocks: []int{1, 2}, Classes: 10}, 2, 33, 35, "generic", cpuBackend{}},
		{"odd-widths", resnet.Arch{InChannels: 1, Stem: 5, Widths: []int{7, 9, 11}, Blocks: []int{2, 1, 1}, Classes: 3}, 2, 37, 41, "", cpuBackend{}},
		{"resnet18", resnet.ResNet18(), 2, 40, 44, "", cpuBackend{}},
		{"resnet18-avx2", resnet.ResNet18(), 1, 37, 33, "avx2", cpuBackend{}},
		// Winograd off: every layer a direct convolution.
		{"resnet18-winograd-off", resnet.ResNet18(), 2, 40, 44, "", cpuBackend{tile: -1}},
		// Both Winograd tiles, whichever is this CPU's default.
		{"resnet18-winograd-2x2", resnet.ResNet18(), 2, 40, 44, "", cpuBackend{tile: 2}},
		{"resnet18-winograd-4x4", resnet.ResNet18(), 2, 40, 44, "", cpuBackend{tile: 4}},
		// More images than one forward pass takes: passes of maxImages and the rest.
		{"multi-pass", resnet.Arch{InChannels: 3, Stem: 16, Widths: []int{16, 32}, Blocks: []int{1, 1}, Classes: 7}, 2*maxImages + 3, 32, 34, "", cpuBackend{}},
		// Every step a job of its own.
		{"resnet18-serial", resnet.ResNet18(), 2, 40, 44, "", cpuBackend{serial: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.kernel != "" {
				if !slices.Contains(gemm.Kernels(), tc.kernel) {
					t.Skipf("no %s kernel on this CPU", tc.kernel)
				}
				t.Setenv(switches.GemmKernel.Name, tc.kernel)
			}
			if tc.arch.Classes == 1000 && testing.Short() {
				t.Skip("ResNet-18 reference is slow")
			}
			m, err := resnet.New(tc.arch, 42)
			require.NoError(t, err)
			perturb(m, 1)
			x := randImages(tc.batch, tc.arch.InChannels, tc.h, tc.w, 2)
			want, err := m.Reference(x, tc.batch, tc.h, tc.w)
			require.NoError(t, err)

			e, err := tc.plan.Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: tc.batch, Height: tc.h, Width: tc.w})
			require.NoError(t, err)
			defer func() { require.NoError(t, e.Close()) }()
			w := e.Workers()[0]
			per := tc.arch.InChannels * tc.h * tc.w
			// Two parts: the first image alone, the rest together.
			require.NoError(t, w.CopyIn(0, [][]float32{x[:per], x[per:]}))
			require.NoError(t, w.Compute(0, tc.batch))
			require.NoError(t, w.CopyOut(0, tc.batch))
			_, err = w.Wait(0)
			require.NoError(t, err)
			got := w.Output(0)[:len(want)]

			scale, worst := 0.0, 0.0
			for i := range want {
				scale = max(scale, math.Abs(want[i]))
				worst = max(worst, math.Abs(float64(got[i])-want[i]))
			}
			t.Logf("max |logit| %.4g, max abs error %.3g (%.3g relative)", scale, worst, worst/scale)
			assert.LessOrEqual(t, worst, 1e-4*scale, "max abs error against the float64 reference")
		})
	}
}

func TestUnsupportedKernel(t *testing.T) {
	t.Setenv(switches.GemmKernel.Name, "nope")
	m, err := resnet.New(resnet.Arch{InChannels: 3, Stem: 8, Widths: []int{8}, Blocks: []int{1}, Classes: 2}, 1)
	require.NoError(t, err)
	_, err = New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 1, Height: 32, Width: 32})
	assert.ErrorContains(t, err, `cpu: gemm: kernel "nope"`)
}

func TestForwardAllocs(t *testing.T) {
	m, err := resnet.New(resnet.Arch{InChannels: 3, Stem: 8, Widths: []int{8, 16}, Blocks: []int{1, 1}, Classes: 10}, 1)
	require.NoError(t, err)
	e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 2, Height: 48, Width: 48})
	require.NoError(t, err)
	defer e.Close()
	w := e.Workers()[0]
	x := randImages(2, 3, 48, 48, 3)
	parts := [][]float32{x}
	allocs := testing.AllocsPerRun(10, func() {
		if err := w.CopyIn(0, parts); err != nil {
			t.Fatal(err)
		}
		if err := w.Compute(0, 2); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "allocations per batch")
}

func TestConcurrentWorkers(t *testing.T) {
	arch := resnet.Arch{InChannels: 3, Stem: 8, Widths: []int{8, 16}, Blocks: []int{1, 1}, Classes: 10}
	m, err := resnet.New(arch, 5)
	require.NoError(t, err)
	e, err := New().Open(m, backend.Options{Workers: 3, Slots: 1, MaxBatch: 1, Height: 40, Width: 40})
	require.NoError(t, err)
	defer e.Close()
	x := randImages(1, 3, 40, 40, 4)
	want, err := m.Reference(x, 1, 40, 40)
	require.NoError(t, err)
	errs := make(chan error, len(e.Workers()))
	for _, w := range e.Workers() {
		go func() {
			for range 5 {
				if err := w.CopyIn(0, [][]float32{x}); err != nil {
					errs <- err
					return
				}
				if err := w.Compute(0, 1); err != nil {
					errs <- err
					return
				}
				for i, v := range w.Output(0)[:arch.Classes] {
					if math.Abs(float64(v)-want[i]) > 1e-4 {
						errs <- fmt.Errorf("logit %d = %v, want %v", i, v, want[i])
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range e.Workers() {
		assert.NoError(t, <-errs)
	}
}

var forwardBatches = flag.String("batches", "1,8", "BenchmarkForward: batch sizes, comma-separated")

// BenchmarkForward measures ResNet-18 at 250x250, the anchor's input, one
// batch at a time through a worker, on GOMAXPROCS threads (set it with the
// GOMAXPROCS environment variable). The names,
// backend=cpu/threads=N/batch=B, are those scripts/pytorch_cpu_bench.py gives
// PyTorch's and onnxruntime's forward pass, so benchstat -col /backend puts
// them side by side.
func BenchmarkForward(b *testing.B) {
	forEachForwardBatch(b, func(b *testing.B, e backend.Engine, batch int, parts [][]float32, rssReset bool) {
		wk := e.Workers()[0]
		b.ReportAllocs()
		for b.Loop() {
			if err := wk.CopyIn(0, parts); err != nil {
				b.Fatal(err)
			}
			if err := wk.Compute(0, batch); err != nil {
				b.Fatal(err)
			}
		}
		sec := b.Elapsed().Seconds()
		b.ReportMetric(float64(batch*b.N)/sec, "images/s")
		b.ReportMetric(sec*1e3/float64(b.N), "ms/batch")
		if mb, ok := peakRSS(); ok && rssReset {
			b.ReportMetric(mb, "peak-rss-MB")
		}
	})
}

// forEachForwardBatch runs body as a sub-benchmark per -batches size,
// backend=cpu/threads=N/batch=B, with a one-worker engine for ResNet-18 at
// 250x250 and one untimed pass already made (the first touches the scratch
// memory); parts is the batch's input, and rssReset says whether the peak
// resident set size was reset before the engine was made (peak-rss-MB is
// then the sub-benchmark's, not the process's).
func forEachForwardBatch(b *testing.B, body func(b *testing.B, e backend.Engine, batch int, parts [][]float32, rssReset bool)) {
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(b, err)
	const h, w = 250, 250
	batches, err := parseBatches(*forwardBatches)
	require.NoError(b, err, "-batches")
	for _, batch := range batches {
		b.Run(fmt.Sprintf("backend=cpu/threads=%d/batch=%d", runtime.GOMAXPROCS(0), batch), func(b *testing.B) {
			rssReset := resetPeakRSS()
			e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: batch, Height: h, Width: w})
			require.NoError(b, err)
			defer e.Close()
			parts := [][]float32{randImages(batch, 3, h, w, 1)}
			wk := e.Workers()[0]
			require.NoError(b, wk.CopyIn(0, parts))
			require.NoError(b, wk.Compute(0, batch))
			body(b, e, batch, parts, rssReset)
		})
	}
}

// parseBatches reads a comma-separated list of batch sizes.
func parseBatches(list string) ([]int, error) {
	var batches []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if n < 1 {
			return nil, fmt.Errorf("batch %d: must be at least 1", n)
		}
		batches = append(batches, n)
	}
	return batches, nil
}

// peakRSS is the process's peak resident set size in MiB (VmHWM) since the
// last resetPeakRSS, where /proc reports it.
func peakRSS() (float64, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				return 0, false
			}
			return float64(kb) / 1024, true
		}
	}
	return 0, false
}

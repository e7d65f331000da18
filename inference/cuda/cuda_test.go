//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
	"github.com/inferbench/inferbench/inference/internal/switches"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/inference/resnet/testref"
)

// requireGPU skips the test, saying why, unless the driver initialises and
// reports a device.
func requireGPU(t testing.TB) {
	t.Helper()
	if _, err := deviceCount(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
}

// repoPath returns rel under the module root, found by walking up from the
// working directory (go test runs in the package directory; a test binary
// carried to the GPU machine runs in the repository root).
func repoPath(rel string) string {
	dir, err := os.Getwd()
	if err != nil {
		return rel
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, rel)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return rel
		}
		dir = parent
	}
}

func randomInput(n, h, w int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n*3*h*w)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// run pushes x (n images) through worker 0 of e in the given parts and returns
// the logits.
func run(t testing.TB, e backend.Engine, parts [][]float32, n int) []float32 {
	t.Helper()
	times := runTimed(t, e, parts, n)
	assert.True(t, times.Valid)
	assert.Positive(t, times.Compute)
	return logitsOf(e, n)
}

// logitsOf copies the logits of the n images slot 0 of worker 0 last ran.
func logitsOf(e backend.Engine, n int) []float32 {
	w := e.Workers()[0]
	return append([]float32(nil), w.Output(0)[:n*len(w.Output(0))/e.(*engine).opts.MaxBatch]...)
}

// runTimed pushes one batch through slot 0 of worker 0 and returns its times.
func runTimed(t testing.TB, e backend.Engine, parts [][]float32, n int) backend.Times {
	t.Helper()
	return runBatch(t, e, n, func(w backend.Worker) error { return w.CopyIn(0, parts) })
}

// runBatch pushes n images through slot 0 of worker 0, copied in by copyIn,
// and returns the batch's times.
func runBatch(t testing.TB, e backend.Engine, n int, copyIn func(backend.Worker) error) backend.Times {
	t.Helper()
	w := e.Workers()[0]
	release, err := w.Bind()
	require.NoError(t, err)
	defer release()
	require.NoError(t, copyIn(w))
	require.NoError(t, w.Compute(0, n))
	require.NoError(t, w.CopyOut(0, n))
	times, err := w.Wait(0)
	require.NoError(t, err)
	return times
}

// relErr is max|got-want| / max|want|.
func relErr(got []float32, want []float64) (rel, scale float64) {
	var diff float64
	for i := range want {
		diff = max(diff, math.Abs(float64(got[i])-want[i]))
		scale = max(scale, math.Abs(want[i]))
	}
	return diff / scale, scale
}

func tolerance(p backend.Precision) float64 {
	if p == backend.FP32 {
		return 1e-4
	}
	return 1e-2
}

var precisions = []backend.Precision{backend.FP32, backend.TF32, backend.FP16}

func TestDescribe(t *testing.T) {
	requireGPU(t)
	kv, err := Describe()
	require.NoError(t, err)
	keys := map[string]string{}
	for _, l := range kv {
		keys[l.Key] = l.Value
		t.Logf("%s: %s", l.Key, l.Value)
	}
	for _, k := range []string{"gpu", "driver", "cuda", "cudnn"} {
		assert.NotEmpty(t, keys[k], "config line %q", k)
	}
}

func TestLogitsMatchReference(t *testing.T) {
	requireGPU(t)
	small := resnet.Arch{InChannels: 3, Stem: 8, Widths: []int{8, 16, 16, 32}, Blocks: []int{1, 2, 1, 1}, Classes: 10}
	tests := []struct {
		name       string
		arch       resnet.Arch
		n, h, w    int
		maxBatch   int
		batches    []int
		pipeline   backend.Pipeline
		pinned     bool
		pinnedOnly bool // Options.PinnedInput: no staging, pageable parts go through the driver
		splitParts bool
	}{
		{name: "small", arch: small, n: 3, h: 64, w: 48, maxBatch: 3},
		{name: "small/heuristic-plan/overlap/parts", arch: small, n: 3, h: 64, w: 48, maxBatch: 5, batches: []int{1},
			pipeline: backend.Overlap, splitParts: true},
		{name: "small/pinned", arch: small, n: 4, h: 64, w: 48, maxBatch: 4, pinned: true, splitParts: true},
		{name: "small/pinned-input-option/overlap", arch: small, n: 4, h: 64, w: 48, maxBatch: 4, pipeline: backend.Overlap,
			pinned: true, pinnedOnly: true, splitParts: true},
		{name: "resnet18", arch: resnet.ResNet18(), n: 2, h: 250, w: 250, maxBatch: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.arch.Stem == 64 && testing.Short() {
				t.Skip("full ResNet-18 reference is slow; skipped in -short")
			}
			m, err := resnet.New(tt.arch, 1)
			require.NoError(t, err)
			x := randomInput(tt.n, tt.h, tt.w, 2)
			t0 := time.Now()
			want, err := m.Reference(x, tt.n, tt.h, tt.w)
			require.NoError(t, err)
			t.Logf("CPU float64 reference: %v", time.Since(t0).Round(time.Millisecond))
			for _, cfg := range configs() {
				prec := cfg.prec
				opts := backend.Options{Workers: 1, Slots: 1, MaxBatch: tt.maxBatch, Height: tt.h, Width: tt.w,
					Pipeline: tt.pipeline, Precision: prec, Batches: tt.batches, Graphs: cfg.graphs, PinnedInput: tt.pinnedOnly}
				e, err := New().Open(m, opts)
				require.NoError(t, err)
				if tt.pinnedOnly {
					for _, w := range e.(*engine).workers {
						for i := range w.slots {
							require.Nil(t, w.slots[i].stage, "PinnedInput: slot %d has a staging buffer", i)
						}
					}
				}
				input := x
				if tt.pinned {
					p, err := e.(backend.Allocator).AllocHost(len(x))
					require.NoError(t, err)
					copy(p, x)
					input = p
				}
				parts := [][]float32{input}
				if tt.splitParts {
					per := 3 * tt.h * tt.w
					parts = [][]float32{input[:per], input[per:]}
					if tt.pinned {
						// Two adjacent pinned parts (one copy), a pageable one, a pinned one.
						parts = [][]float32{input[:per], input[per : 2*per], x[2*per : 3*per], input[3*per:]}
					}
				}
				got := run(t, e, parts, tt.n)
				rel, scale := relErr(got, want)
				t.Logf("%s %s graphs=%v: max abs error %.3g = %.3g x max|logit| (%.3g)", tt.name, prec, cfg.graphs, rel*scale, rel, scale)
				assert.LessOrEqual(t, rel, tolerance(prec), "%s: relative error", prec)
				if tt.pinned {
					require.NoError(t, e.(backend.Allocator).FreeHost(input))
				}
				require.NoError(t, e.Close())
				require.NoError(t, e.Close(), "second Close")
			}
		})
	}
}

func TestPyTorchReference(t *testing.T) {
	requireGPU(t)
	dir := repoPath("testdata/reference")
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
		t.Skipf("no PyTorch reference cases: %v", err)
	}
	cases, err := testref.Load(dir)
	require.NoError(t, err)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			for _, prec := range precisions {
				e, err := New().Open(c.Model, backend.Options{Workers: 1, Slots: 1, MaxBatch: c.N, Height: c.H, Width: c.W, Precision: prec})
				require.NoError(t, err)
				got := run(t, e, [][]float32{c.Input}, c.N)
				rel, scale := relErr(got, c.Logits)
				t.Logf("%s %s: max abs error %.3g = %.3g x max|logit| (%.3g)", c.Name, prec, rel*scale, rel, scale)
				assert.LessOrEqual(t, rel, tolerance(prec), "%s: relative error", prec)
				require.NoError(t, e.Close())
			}
		})
	}
}

type config struct {
	prec   backend.Precision
	graphs bool
}

func configs() []config {
	var out []config
	for _, p := range precisions {
		out = append(out, config{p, false}, config{p, true})
	}
	return out
}

// configValue is the value of config line key, or "".
func configValue(kv []backend.KV, key string) string {
	for _, l := range kv {
		if l.Key == key {
			return l.Value
		}
	}
	return ""
}

// stepNames lists the names of the warm-up parts that are steps, not
// sub-steps ("init", not "init.context").
func stepNames(parts []backend.Part) []string {
	var out []string
	for _, p := range parts {
		if !strings.Contains(p.Name, ".") {
			out = append(out, p.Name)
		}
	}
	return out
}

// checkSubSteps checks that parts hold every sub-step in want, each right
// after its step or a sibling, and that init's sub-steps took no longer than
// init.
func checkSubSteps(t *testing.T, parts []backend.Part, want []string) {
	t.Helper()
	byName := map[string]time.Duration{}
	step := ""
	for _, p := range parts {
		byName[p.Name] = p.Time
		if s, _, ok := strings.Cut(p.Name, "."); ok {
			assert.Equal(t, step, s, "sub-step %s follows step %s", p.Name, step)
		} else {
			step = p.Name
		}
	}
	for _, n := range want {
		if assert.Contains(t, byName, n, "sub-step") && strings.HasPrefix(n, "init.") {
			assert.LessOrEqual(t, byName[n], byName["init"], "%s within init", n)
		}
	}
}

// TestWarmup opens ResNet-18 for batches 1, 32 and 256 twice per
// configuration with a fresh algorithm cache file: the first Open searches and
// says its start was cold, the second finds every algorithm and says warm.
func TestWarmup(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(t, err)
	timeline := filepath.Join(t.TempDir(), "timeline.txt")
	t.Setenv(switches.CUDATimeline.Name, timeline)
	for _, cfg := range configs() {
		path := filepath.Join(t.TempDir(), "algos.json")
		searched := 0
		for _, round := range []string{"cold", "warm"} {
			t0 := time.Now()
			e, err := New().Open(m, backend.Options{Workers: 1, Slots: 2, MaxBatch: 256, Height: 250, Width: 250,
				Precision: cfg.prec, Graphs: cfg.graphs, Batches: []int{1, 32, 256}, AlgoCache: path})
			require.NoError(t, err)
			open := time.Since(t0)
			info := e.Info()
			use := e.(*engine).plans.cache
			t.Logf("%s graphs=%v %s cache: Open %v, %s, parts %v", cfg.prec, cfg.graphs, round,
				open.Round(time.Millisecond), configValue(info.Config, "cudnn-algo-cache"), info.Setup)
			require.NoError(t, use.err)
			assert.Empty(t, configValue(info.Config, "cudnn-algo-cache-error"))
			assert.Equal(t, path, configValue(info.Config, "cudnn-algo-cache-file"))
			if round == "cold" {
				searched = use.misses
				require.Positive(t, searched, "a fresh cache file searches")
				assert.Equal(t, fmt.Sprintf("cold hits=0 misses=%d", searched), configValue(info.Config, "cudnn-algo-cache"))
			} else {
				assert.Equal(t, fmt.Sprintf("warm hits=%d misses=0", searched), configValue(info.Config, "cudnn-algo-cache"))
			}
			want := []string{"init", "plan", "prime", "calibrate"}
			subs := []string{"init.driver", "init.context", "init.libraries", "init.fold", "init.network", "init.weights",
				"init.kernels", "init.cudnn-handles", "init.buffers", "init.pin", "init.nvml",
				"plan.cache", "plan.workers"}
			if cfg.graphs {
				want = []string{"init", "plan", "capture", "prime"}
				subs = append(subs, "capture.record.first-slot", "capture.record.other-slots", "capture.instantiate", "capture.upload") // Slots: 2
			}
			if round == "cold" {
				subs = append(subs, "plan.search")
			}
			assert.Equal(t, want, stepNames(info.Setup), "warm-up steps")
			checkSubSteps(t, info.Setup, subs)
			assert.Equal(t, timeline, configValue(info.Config, "cuda-timeline"))
			tl, err := os.ReadFile(timeline)
			require.NoError(t, err)
			runs := []string{"init.context", "init.pin (worker 0)", "plan.cache (batch 1 conv 0)"}
			if round == "cold" {
				runs[2] = "plan.search (batch 1 conv 0)"
			}
			if cfg.graphs {
				runs = append(runs, "capture.record.first-slot (worker 0 slot 0 batch 256 uint8)", "capture.record.other-slots (worker 0 slot 1 batch 1)")
			}
			for _, r := range runs {
				assert.Contains(t, string(tl), "  "+r+"\n", "the timeline has a line for every run")
			}
			if cfg.prec == backend.FP32 && !cfg.graphs && round == "cold" {
				for _, kv := range info.Config {
					t.Logf("  %s: %s", kv.Key, kv.Value)
				}
			}
			require.NoError(t, e.Close())
		}
	}
}

// TestAlgoCacheOff checks that AlgoCache "off" searches without a file.
func TestAlgoCacheOff(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	t.Setenv(switches.CUDNNCache.Name, filepath.Join(t.TempDir(), "must-not-be-written.json"))
	e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 2, Height: 32, Width: 32, AlgoCache: "off"})
	require.NoError(t, err)
	defer e.Close()
	state := configValue(e.Info().Config, "cudnn-algo-cache")
	assert.Regexp(t, `^off hits=0 misses=[1-9][0-9]*$`, state)
	assert.Equal(t, "none", configValue(e.Info().Config, "cudnn-algo-cache-file"))
	_, err = os.Stat(switches.CUDNNCache.Value())
	assert.ErrorIs(t, err, os.ErrNotExist, "no cache file written")
}

// TestSampler runs ResNet-18 at batch 64 for 1.5 s and checks that NVML took
// samples (one per 100 ms) and that the busy share was measured.
func TestSampler(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(t, err)
	e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 64, Height: 250, Width: 250})
	require.NoError(t, err)
	defer e.Close()
	x := randomInput(64, 250, 250, 3)
	s := e.Sampler()
	require.NotNil(t, s)
	require.NoError(t, e.(*engine).sampler.nvmlErr, "NVML finds the CUDA device by its PCI location")
	assert.Equal(t, "utilization.gpu every 100ms", configValue(e.Info().Config, "nvml"))
	require.NoError(t, s.Start())
	t0 := time.Now()
	for time.Since(t0) < 1500*time.Millisecond {
		run(t, e, [][]float32{x}, 64)
	}
	u, err := s.Stop()
	require.NoError(t, err)
	t.Logf("utilisation: %+v", u)
	assert.Equal(t, backend.GPUUtilization, u.Kind)
	require.NoError(t, u.PercentErr, "NVML measured")
	assert.GreaterOrEqual(t, u.Samples, 10, "samples of 1.5 s at one per 100 ms")
	assert.True(t, u.HasBusy)
	assert.Greater(t, u.Busy, 1.0)
	assert.LessOrEqual(t, u.Busy, 100.0)

	// An interval shorter than the sampling period measures no utilisation.
	require.NoError(t, s.Start())
	u, err = s.Stop()
	require.NoError(t, err)
	assert.Error(t, u.PercentErr, "no sample in an empty interval")
	assert.Equal(t, backend.NoUtilization, u.Kind)
	assert.Zero(t, u.Samples)
}

// TestLaunchGap runs ResNet-18 at batch 1, fp16, one batch at a time from
// pinned memory, for 2 s without graphs and 2 s with. Without graphs the host
// takes longer to enqueue the ~30 library calls than the device takes to run
// them, so most of the compute stream's span is launch gap. Checked against
// figures measured independently: the execution time without graphs must be
// near the graph's (events around one launch), and the busy share near NVML's
// utilisation, not near the span's share of the time.
func TestLaunchGap(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(t, err)
	x := randomInput(1, 250, 250, 5)
	type result struct {
		compute, gap, span, wall time.Duration
		batches                  int
		util                     backend.Utilization
	}
	measure := func(graphs bool) result {
		e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 1, Height: 250, Width: 250,
			Precision: backend.FP16, Graphs: graphs})
		require.NoError(t, err)
		defer e.Close()
		require.Empty(t, configValue(e.Info().Config, "cuda-calibration"), "calibration failed")
		in, err := e.(backend.Allocator).AllocHost(len(x))
		require.NoError(t, err)
		copy(in, x)
		s := e.Sampler()
		require.NoError(t, s.Start())
		var r result
		t0 := time.Now()
		for time.Since(t0) < 2*time.Second {
			times := runTimed(t, e, [][]float32{in}, 1)
			require.True(t, times.HasLaunchGap, "launch gap measured")
			r.compute += times.Compute
			r.gap += times.LaunchGap
			r.batches++
		}
		r.wall = time.Since(t0)
		r.util, err = s.Stop()
		require.NoError(t, err)
		r.compute /= time.Duration(r.batches)
		r.gap /= time.Duration(r.batches)
		r.span = r.compute + r.gap
		t.Logf("graphs=%v: %d batches in %v, per batch: span %v = execution %v + launch gap %v; busy %.1f %%, span share %.1f %%, NVML %.1f %% (%d samples)",
			graphs, r.batches, r.wall.Round(time.Millisecond), r.span, r.compute, r.gap, r.util.Busy,
			100*float64(r.span)*float64(r.batches)/float64(r.wall), r.util.Percent, r.util.Samples)
		return r
	}
	calls, graph := measure(false), measure(true)

	assert.Less(t, graph.gap, graph.span/4, "with a graph the device waits only for the one launch")
	ratio := float64(calls.compute) / float64(graph.compute)
	assert.True(t, ratio > 0.5 && ratio < 2.5, "execution without graphs %v, with graphs %v: ratio %.2f, want 0.5-2.5",
		calls.compute, graph.compute, ratio)
	assert.Greater(t, calls.gap, calls.compute, "the host-bound pass without graphs is mostly launch gap")
	require.True(t, calls.util.HasBusy)
	spanShare := 100 * float64(calls.span) * float64(calls.batches) / float64(calls.wall)
	assert.Less(t, calls.util.Busy, spanShare/2, "busy counts execution, not the span")
	require.Positive(t, calls.util.Samples, "NVML sampled")
	assert.InDelta(t, calls.util.Percent, calls.util.Busy, 25, "busy (events) against NVML's utilisation")
}

// TestFP16AgreesWithFP32 checks issue 5's bar: on 256 random inputs, FP16 picks
// the same top class as FP32 for at least 99 % and its logits stay within 1e-2
// of the logits' scale.
func TestFP16AgreesWithFP32(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 7)
	require.NoError(t, err)
	const n = 256
	x := randomInput(n, 250, 250, 11)
	logits := map[backend.Precision][]float32{}
	for _, prec := range []backend.Precision{backend.FP32, backend.FP16} {
		e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: n, Height: 250, Width: 250, Precision: prec})
		require.NoError(t, err)
		logits[prec] = run(t, e, [][]float32{x}, n)
		require.NoError(t, e.Close())
	}
	rel, scale, agree := agreement(logits[backend.FP16], logits[backend.FP32], m.Arch.Classes)
	t.Logf("fp16 vs fp32, %d images: top-1 agreement %d/%d, max abs error %.3g = %.3g x max|logit| (%.3g)",
		n, agree, n, rel*scale, rel, scale)
	assert.GreaterOrEqual(t, float64(agree)/n, 0.99, "top-1 agreement")
	assert.LessOrEqual(t, rel, 1e-2, "relative error")
}

// agreement compares the logits got with want, images of classes logits
// each: the largest error relative to want's largest logit (relErr) and
// how many images' top-1 classes agree.
func agreement(got, want []float32, classes int) (rel, scale float64, agree int) {
	w := make([]float64, len(want))
	for i, v := range want {
		w[i] = float64(v)
	}
	rel, scale = relErr(got, w)
	for i := 0; i < len(want)/classes; i++ {
		if argmax(got[i*classes:(i+1)*classes]) == argmax(want[i*classes:(i+1)*classes]) {
			agree++
		}
	}
	return rel, scale, agree
}

func argmax(v []float32) int {
	best := 0
	for i := range v {
		if v[i] > v[best] {
			best = i
		}
	}
	return best
}

func TestOpenErrors(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.Arch{InChannels: 3, Stem: 4, Widths: []int{4}, Blocks: []int{1}, Classes: 2}, 1)
	require.NoError(t, err)
	tests := []struct {
		name string
		opts backend.Options
	}{
		{"no workers", backend.Options{Slots: 1, MaxBatch: 1, Height: 32, Width: 32}},
		{"too small", backend.Options{Workers: 1, Slots: 1, MaxBatch: 1, Height: 16, Width: 32}},
		{"missing device", backend.Options{Workers: 1, Slots: 1, MaxBatch: 1, Height: 32, Width: 32, Devices: []int{99}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New().Open(m, tt.opts)
			assert.Error(t, err)
		})
	}
}

func TestDeviceLost(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"illegal address", cudadrv.ErrIllegalAddress, true},
		{"launch failed, wrapped", fmt.Errorf("x: %w", cudadrv.ErrLaunchFailed), true},
		{"launch timeout", cudadrv.Result(702), true},
		{"out of memory", cudadrv.ErrOutOfMemory, false},
		{"cuDNN execution failed", cudnn.Status(5003), true},
		{"cuDNN bad parameter", cudnn.StatusBadParam, false},
	}
	w := &worker{id: 1, dev: &device{ordinal: 0}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, deviceLost(tt.err), "deviceLost(%v)", tt.err)
			err := w.wrap("compute", tt.err)
			assert.ErrorIs(t, err, tt.err)
			assert.Equal(t, tt.want, errors.Is(err, backend.ErrDeviceLost), "wrap(%v) is ErrDeviceLost", tt.err)
		})
	}
}

// TestOverlapGoroutines drives a worker as the server's Overlap pipeline does,
// copy-in, compute and copy-out/wait on three goroutines with three slots in
// flight, and checks every batch's logits against a serial run.
func TestOverlapGoroutines(t *testing.T) {
	requireGPU(t)
	arch := resnet.Arch{InChannels: 3, Stem: 8, Widths: []int{8, 16}, Blocks: []int{1, 1}, Classes: 10}
	m, err := resnet.New(arch, 3)
	require.NoError(t, err)
	const n, h, w, batches, slots = 4, 64, 48, 40, 3
	inputs := make([][]float32, batches)
	for i := range inputs {
		inputs[i] = randomInput(n, h, w, uint64(100+i))
	}
	for _, cfg := range []config{{backend.FP32, false}, {backend.FP16, true}} {
		t.Run(fmt.Sprintf("%s/graphs=%v", cfg.prec, cfg.graphs), func(t *testing.T) {
			e, err := New().Open(m, backend.Options{Workers: 1, Slots: slots, MaxBatch: n, Height: h, Width: w,
				Pipeline: backend.Overlap, Precision: cfg.prec, Graphs: cfg.graphs})
			require.NoError(t, err)
			defer e.Close()
			want := make([][]float32, batches)
			for i, x := range inputs {
				want[i] = run(t, e, [][]float32{x}, n)
			}

			wk := e.Workers()[0]
			type job struct{ i, slot int }
			free := make(chan int, slots)
			for s := range slots {
				free <- s
			}
			toCompute, toOut := make(chan job, slots), make(chan job, slots)
			got := make([][]float32, batches)
			errs := make(chan error, 3)
			var wg sync.WaitGroup
			stage := func(f func() error) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					release, err := wk.Bind()
					if err == nil {
						defer release()
					}
					errs <- errors.Join(err, f()) // f still runs (and fails) so the other stages end
				}()
			}
			stage(func() error {
				defer close(toCompute)
				for i := range batches {
					slot := <-free
					if err := wk.CopyIn(slot, [][]float32{inputs[i]}); err != nil {
						return err
					}
					toCompute <- job{i, slot}
				}
				return nil
			})
			stage(func() error {
				defer close(toOut)
				for j := range toCompute {
					if err := wk.Compute(j.slot, n); err != nil {
						return err
					}
					toOut <- j
				}
				return nil
			})
			stage(func() error {
				for j := range toOut {
					if err := wk.CopyOut(j.slot, n); err != nil {
						return err
					}
					if _, err := wk.Wait(j.slot); err != nil {
						return err
					}
					got[j.i] = append([]float32(nil), wk.Output(j.slot)[:n*arch.Classes]...)
					free <- j.slot
				}
				return nil
			})
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			for i := range batches {
				ref := make([]float64, len(want[i]))
				for k, v := range want[i] {
					ref[k] = float64(v)
				}
				rel, _ := relErr(got[i], ref)
				assert.LessOrEqual(t, rel, 1e-6, "batch %d: pipelined logits differ from serial ones", i)
			}
		})
	}
}

// TestOpenWithoutGPU runs where the driver finds no GPU (or there is no
// driver): Open and Describe fail with errors wrapping backend.ErrNoGPU instead
// of ending the process.
func TestOpenWithoutGPU(t *testing.T) {
	if _, err := deviceCount(); err == nil {
		t.Skip("this machine has a GPU")
	}
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	_, err = New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 1, Height: 32, Width: 32})
	assert.ErrorIs(t, err, backend.ErrNoGPU)
	_, err = Describe()
	assert.ErrorIs(t, err, backend.ErrNoGPU)
}

// TestStartThenOpen checks that Open takes over the contexts an earlier
// Start retained and runs on them, and that a Start no Open follows is
// undone by its stop.
func TestStartThenOpen(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	opts := backend.Options{Workers: 2, Slots: 1, MaxBatch: 2, Height: 32, Width: 32, AlgoCache: "off"}
	pending := func() bool {
		started.mu.Lock()
		defer started.mu.Unlock()
		return started.e != nil
	}
	st := New().(backend.Starter)
	stop := st.Start(opts)
	e, err := New().Open(m, opts)
	require.NoError(t, err)
	assert.False(t, pending(), "Open took the early set-up over")
	logits := run(t, e, [][]float32{randomInput(1, 32, 32, 1)}, 1)
	for _, v := range logits {
		require.False(t, math.IsNaN(float64(v)) || math.IsInf(float64(v), 0), "logits %v", logits)
	}
	require.NoError(t, e.Close())
	stop()

	stop = st.Start(opts)
	stop()
	assert.False(t, pending(), "stop undid a Start without Open")
}

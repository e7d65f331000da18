//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// benchCase is one configuration of BenchmarkWorker.
type benchCase struct {
	prec   backend.Precision
	graphs bool
	pipe   backend.Pipeline
	batch  int
	pinned bool
	direct bool // Options.PinnedInput with pageable input: copied by the driver (no staging of ours)
	split  bool // one part per image, as a server that batches requests passes them
	legacy bool // backend.ConvsLegacy; else ConvsGraph
	// dtype is the input datatype: "fp32" (converted by this package's kernel
	// where the network needs a conversion), "fp32-cudnn" (converted by
	// cudnnTransformTensor) or "uint8" (bytes normalised on the device).
	dtype string
}

func (c benchCase) String() string {
	g, in := "off", "pageable"
	if c.graphs {
		g = "on"
	}
	if c.pinned {
		in = "pinned"
	} else if c.direct {
		in = "pageable-direct"
	}
	if c.split {
		in += "-images"
	}
	dt := c.dtype
	if dt == "" {
		dt = "fp32"
	}
	return fmt.Sprintf("precision=%s/graphs=%s/pipeline=%s/batch=%d/input=%s/convs=%s/datatype=%s", c.prec, g, c.pipe, c.batch, in, c.convs(), dt)
}

func (c benchCase) convs() backend.Convs {
	if c.legacy {
		return backend.ConvsLegacy
	}
	return backend.ConvsGraph
}

func benchCases() []benchCase {
	var cs []benchCase
	batches := []int{1, 32, 256}
	for _, p := range []backend.Precision{backend.FP32, backend.TF32, backend.FP16} {
		for _, g := range []bool{false, true} {
			for _, b := range batches {
				cs = append(cs, benchCase{p, g, backend.Overlap, b, true, false, false, false, ""})
			}
		}
	}
	for _, b := range batches {
		cs = append(cs, benchCase{backend.TF32, false, backend.Serial, b, true, false, false, false, ""})
		cs = append(cs, benchCase{backend.FP16, true, backend.Serial, b, true, false, false, false, ""})
	}
	for _, b := range batches[1:] {
		for _, direct := range []bool{false, true} {
			cs = append(cs, benchCase{backend.TF32, false, backend.Overlap, b, false, direct, false, false, ""})
			cs = append(cs, benchCase{backend.FP16, true, backend.Overlap, b, false, direct, false, false, ""})
		}
	}
	for _, pinned := range []bool{false, true} {
		cs = append(cs, benchCase{backend.TF32, false, backend.Overlap, 256, pinned, false, true, false, ""})
		cs = append(cs, benchCase{backend.FP16, true, backend.Overlap, 256, pinned, false, true, false, ""})
	}
	for _, b := range batches {
		cs = append(cs, benchCase{backend.FP16, true, backend.Overlap, b, true, false, false, true, ""})
	}
	// Input datatypes: uint8 copies a quarter of the bytes; fp32-cudnn is the
	// conversion this package's kernel replaced.
	for _, b := range batches[1:] {
		for _, pinned := range []bool{false, true} {
			for _, dt := range []string{"uint8", "fp32-cudnn"} {
				cs = append(cs, benchCase{backend.FP16, true, backend.Overlap, b, pinned, false, false, false, dt})
			}
		}
	}
	cs = append(cs, benchCase{backend.FP32, true, backend.Overlap, 256, true, false, false, false, "uint8"})
	cs = append(cs, benchCase{backend.TF32, true, backend.Overlap, 256, true, false, false, false, "uint8"})
	return cs
}

// BenchmarkWorker drives one Worker directly with ResNet-18 at 250x250: fp32
// input in host memory (pageable, or pinned from AllocHost), copies included.
// Serial keeps one batch in flight; Overlap keeps three slots in flight from one
// goroutine (the stages are asynchronous, so copies of one batch overlap the
// compute of another).
func BenchmarkWorker(b *testing.B) {
	requireGPU(b)
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(b, err)
	for _, c := range benchCases() {
		b.Run(c.String(), func(b *testing.B) { benchWorker(b, m, c) })
	}
}

func benchWorker(b *testing.B, m *resnet.Model, c benchCase) {
	slots := 1
	if c.pipe == backend.Overlap {
		slots = 3
	}
	batch := c.batch
	t0 := time.Now()
	useInputKernel = c.dtype != "fp32-cudnn"
	defer func() { useInputKernel = true }()
	e, err := New().Open(m, backend.Options{Workers: 1, Slots: slots, MaxBatch: batch, Height: 250, Width: 250,
		Pipeline: c.pipe, Precision: c.prec, Graphs: c.graphs, Convs: c.convs(), Batches: []int{batch}, PinnedInput: c.direct})
	require.NoError(b, err)
	warm := time.Since(t0)
	defer e.Close()
	inputs := make([][]float32, slots)
	for i := range inputs {
		x := randomInput(batch, 250, 250, uint64(i))
		if c.pinned {
			p, err := e.(backend.Allocator).AllocHost(len(x))
			require.NoError(b, err)
			copy(p, x)
			x = p
		}
		inputs[i] = x
	}
	parts := make([][][]float32, slots)
	for i, x := range inputs {
		parts[i] = [][]float32{x}
		if c.split {
			per := len(x) / batch
			parts[i] = nil
			for j := 0; j < batch; j++ {
				parts[i] = append(parts[i], x[j*per:(j+1)*per])
			}
		}
	}
	bytes := make([][]uint8, slots) // uint8 input: one batch per slot, pinned like the float input
	for i := range bytes {
		x := randomBytes(batch, 250, 250, uint64(i))
		if c.pinned {
			p, err := e.(backend.Allocator).AllocHost((len(x) + 3) / 4)
			require.NoError(b, err)
			x = append(asBytes(p)[:0], x...)
		}
		bytes[i] = x
	}
	w := e.Workers()[0]
	copyIn := func(slot int) error {
		if c.dtype == "uint8" {
			return w.(backend.Uint8Worker).CopyInUint8(slot, [][]uint8{bytes[slot]})
		}
		return w.CopyIn(slot, parts[slot])
	}
	release, err := w.Bind()
	require.NoError(b, err)
	defer release()
	var compute, gap, h2d time.Duration
	waits, split := 0, 0
	issued := make([]time.Time, slots)
	latencies := make([]time.Duration, 0, 1<<16)
	wait := func(slot int) {
		t, err := w.Wait(slot)
		require.NoError(b, err)
		latencies = append(latencies, time.Since(issued[slot]))
		compute += t.Compute
		gap += t.LaunchGap
		h2d += t.H2D
		waits++
		if t.HasLaunchGap {
			split++
		}
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
		issued[slot] = time.Now()
		require.NoError(b, copyIn(slot))
		require.NoError(b, w.Compute(slot, batch))
		require.NoError(b, w.CopyOut(slot, batch))
		i++
	}
	for j := max(0, i-slots); j < i; j++ {
		wait(j % slots)
	}
	elapsed := time.Since(start)
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Nanoseconds()), "p50-latency-ns")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Nanoseconds()), "p99-latency-ns")
	u, err := s.Stop()
	require.NoError(b, err)
	b.ReportMetric(float64(i*batch)/elapsed.Seconds(), "images/s")
	b.ReportMetric(float64(compute.Nanoseconds())/float64(waits), "compute-ns")
	if split == waits {
		b.ReportMetric(float64(gap.Nanoseconds())/float64(waits), "launch-gap-ns")
	}
	b.ReportMetric(float64(h2d.Nanoseconds())/float64(waits), "h2d-ns")
	if u.PercentErr == nil {
		b.ReportMetric(u.Percent, "gpu-util-pct")
		b.ReportMetric(float64(u.Samples), "gpu-util-samples")
	}
	if u.HasBusy {
		b.ReportMetric(u.Busy, "busy-pct")
	}
	b.ReportMetric(float64(warm.Nanoseconds()), "warmup-ns")
}

// BenchmarkDevices spreads one worker per GPU over gpus=1 and gpus=2 (skipped
// when the machine has fewer), fp16 with graphs, batch 256, pinned input; each
// worker is driven by its own goroutine, three slots in flight.
func BenchmarkDevices(b *testing.B) {
	requireGPU(b)
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(b, err)
	have, err := deviceCount()
	require.NoError(b, err)
	for _, gpus := range []int{1, 2} {
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
			if gpus > have {
				b.Skipf("%d GPUs, want %d", have, gpus)
			}
			benchDevices(b, m, gpus)
		})
	}
}

func benchDevices(b *testing.B, m *resnet.Model, gpus int) {
	const batch, slots = 256, 3
	devices := make([]int, gpus)
	for i := range devices {
		devices[i] = i
	}
	e, err := New().Open(m, backend.Options{Workers: gpus, Slots: slots, MaxBatch: batch, Height: 250, Width: 250,
		Pipeline: backend.Overlap, Precision: backend.FP16, Graphs: true, Devices: devices, Batches: []int{batch}})
	require.NoError(b, err)
	defer e.Close()
	x := randomInput(batch, 250, 250, 1)
	in, err := e.(backend.Allocator).AllocHost(len(x))
	require.NoError(b, err)
	copy(in, x)

	type lane struct {
		start chan bool // true: issue one more batch; false: drain and stop
		done  chan error
	}
	lanes := make([]lane, gpus)
	var wg sync.WaitGroup
	for i, w := range e.Workers() {
		l := lane{start: make(chan bool), done: make(chan error, 1)}
		lanes[i] = l
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, bindErr := w.Bind()
			if bindErr == nil {
				defer release()
			}
			issued := 0
			for more := range l.start {
				err := bindErr
				if more && err == nil {
					slot := issued % slots
					if issued >= slots {
						_, err = w.Wait(slot)
					}
					err = errors.Join(err, w.CopyIn(slot, [][]float32{in}), w.Compute(slot, batch), w.CopyOut(slot, batch))
					issued++
				} else if err == nil {
					for j := max(0, issued-slots); j < issued; j++ {
						_, werr := w.Wait(j % slots)
						err = errors.Join(err, werr)
					}
				}
				l.done <- err
			}
		}()
	}
	step := func(more bool) {
		for _, l := range lanes {
			l.start <- more
		}
		for _, l := range lanes {
			require.NoError(b, <-l.done)
		}
	}
	iters := 0
	start := time.Now()
	for b.Loop() {
		step(true)
		iters++
	}
	step(false)
	elapsed := time.Since(start)
	for _, l := range lanes {
		close(l.start)
	}
	wg.Wait()
	b.ReportMetric(float64(iters*gpus*batch)/elapsed.Seconds(), "images/s")
}

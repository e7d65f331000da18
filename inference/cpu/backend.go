// Package cpu is the pure-Go back-end: ResNet inference in fp32 on the CPU, using
// every core, with no cgo (the convolution kernels are Go assembly where the
// CPU has AVX-512 or AVX2, portable Go elsewhere). It runs anywhere the Go
// toolchain does.
//
// A batch runs as one forward pass per maxImages images: the images are
// converted to padded NHWC once, then each layer is one call over every image
// of the pass, split across the cores (see package conv), and the layers up
// to the average pool are one job of the threads, in which a thread that
// finds nothing left of a layer starts the next where its input is ready.
// Activations stay
// NHWC with a border of zeros, so convolutions read their input in place;
// batch-norm is folded into the weights, and bias, residual and ReLU are
// applied as each output tile leaves the registers. The 3x3 stride-1 layers
// run as Winograd: with AVX2 F(4x4, 3x3) up to 256 channels and F(2x2, 3x3)
// in stage 4; with AVX-512 F(2x2, 3x3), except on up to two threads, where
// stages 1 and 2 run F(4x4, 3x3) and a pass of one image runs stage 4
// direct, whose weights are fewer bytes to read.
//
// Threads and workers: the engine has one pool of GOMAXPROCS threads, shared
// by its workers one forward pass at a time. Each worker owns its scratch
// memory and a slot's batch runs on every thread, so several workers never
// run more threads than there are cores; more workers only let a batch wait
// for the threads while another computes.
//
// The copy stages are host operations: CopyIn only remembers the request's
// parts (the data is read in place), CopyOut is free, Wait returns at once.
package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/cpu/conv"
	"github.com/inferbench/inferbench/inference/metrics"
	"github.com/inferbench/inferbench/inference/resnet"
)

func init() { backend.Register(New()) }

// New returns the CPU back-end.
func New() backend.Backend { return cpuBackend{} }

// cpuBackend's fields are for this package's tests, which run every plan of
// a forward pass; New leaves them zero.
type cpuBackend struct {
	tile   int  // conv.Spec.Tile of every layer: 0 for conv's rule
	serial bool // each step of a pass a job of its own, not one job
}

func (cpuBackend) Name() string { return "cpu" }

func (b cpuBackend) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	if opts.Workers < 1 || opts.Slots < 1 || opts.MaxBatch < 1 {
		return nil, fmt.Errorf("cpu: Workers, Slots and MaxBatch must be at least 1, got %d, %d, %d", opts.Workers, opts.Slots, opts.MaxBatch)
	}
	if opts.Precision != backend.FP32 {
		return nil, fmt.Errorf("cpu: precision %v not supported (only fp32)", opts.Precision)
	}
	if opts.Graphs {
		return nil, fmt.Errorf("cpu: graphs not supported")
	}
	if err := resnet.CheckInput(opts.Height, opts.Width); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	p, err := newPool(runtime.GOMAXPROCS(0))
	if err != nil {
		return nil, err
	}
	net, err := compile(m.Fold(), opts.Height, opts.Width, conv.Spec{Kernel: p.ctx.Kernel(), Tile: b.tile, Threads: p.ctx.Threads()})
	if err != nil {
		return nil, errors.Join(err, p.close())
	}
	net.serial = b.serial
	e := &engine{net: net, pool: p}
	for i := 0; i < opts.Workers; i++ {
		w := &worker{net: net, pool: p, scratch: net.newScratch(p, min(opts.MaxBatch, maxImages)), slots: make([]slot, opts.Slots)}
		for s := range w.slots {
			w.slots[s].out = make([]float32, opts.MaxBatch*net.classes)
		}
		e.workers = append(e.workers, w)
	}
	return e, nil
}

type engine struct {
	net     *network
	pool    *pool
	workers []backend.Worker
	once    sync.Once
}

func (e *engine) Info() backend.Info {
	return backend.Info{Config: []backend.KV{
		{Key: "cpu-threads", Value: fmt.Sprint(e.pool.n)},
		{Key: "cpu-gemm-kernel", Value: e.pool.ctx.Kernel()},
	}}
}

func (e *engine) Workers() []backend.Worker { return e.workers }

func (e *engine) Sampler() backend.Sampler { return &sampler{} }

// sampler reports the process's CPU utilisation as the engine's.
type sampler struct{ cpu metrics.CPUSampler }

func (s *sampler) Start() error { return s.cpu.Start() }

func (s *sampler) Stop() (backend.Utilization, error) {
	pct, err := s.cpu.Stop()
	if err != nil {
		return backend.Utilization{}, err
	}
	return backend.Utilization{Kind: backend.ProcessCPU, Percent: pct}, nil
}

func (e *engine) Close() error {
	var err error
	e.once.Do(func() { err = e.pool.close() })
	return err
}

type slot struct {
	parts [][]float32
	out   []float32
}

type worker struct {
	net     *network
	pool    *pool
	scratch *scratch
	slots   []slot
}

func (w *worker) Bind() (func(), error)           { return func() {}, nil }
func (w *worker) Slots() int                      { return len(w.slots) }
func (w *worker) Output(s int) []float32          { return w.slots[s].out }
func (w *worker) Device() int                     { return 0 }
func (w *worker) CopyOut(int, int) error          { return nil }
func (w *worker) Wait(int) (backend.Times, error) { return backend.Times{}, nil }

func (w *worker) CopyIn(s int, parts [][]float32) error {
	w.slots[s].parts = append(w.slots[s].parts[:0], parts...)
	return nil
}

func (w *worker) Compute(s int, n int) error {
	if gatePlant {
		defer plantCompute(processCPU())
	}
	sl := &w.slots[s]
	net, sc := w.net, w.scratch
	img := net.inputSize
	sc.imgs = sc.imgs[:0]
	done := 0 // images whose logits are written
	for _, p := range sl.parts {
		for off := 0; off+img <= len(p) && done+len(sc.imgs) < n; off += img {
			sc.imgs = append(sc.imgs, p[off:off+img])
			if len(sc.imgs) == cap(sc.imgs) {
				if err := net.forward(w.pool, sc, sl.out[done*net.classes:]); err != nil {
					return err
				}
				done += len(sc.imgs)
				sc.imgs = sc.imgs[:0]
			}
		}
	}
	if len(sc.imgs) > 0 {
		if err := net.forward(w.pool, sc, sl.out[done*net.classes:]); err != nil {
			return err
		}
		done += len(sc.imgs)
		sc.imgs = sc.imgs[:0]
	}
	if done != n {
		return fmt.Errorf("cpu: slot holds %d images, asked to compute %d", done, n)
	}
	return nil
}

// RegisterHost does nothing: the CPU back-end reads inputs where they are.
func (e *engine) RegisterHost([]byte) (func() error, error) { return func() error { return nil }, nil }

var _ backend.HostRegistrar = (*engine)(nil)

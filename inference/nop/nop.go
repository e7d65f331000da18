// Package nop is a zero-cost back-end: its "model" copies the first Classes input
// values of every image to that image's logits and does nothing else. It measures
// what the server itself costs per request, and lets tests check that every
// response carries its own request's data.
package nop

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// New returns the zero-cost back-end.
func New() backend.Backend { return nopBackend{} }

type nopBackend struct{}

func (nopBackend) Name() string { return "nop" }

func (nopBackend) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	if opts.Workers < 1 || opts.Slots < 1 || opts.MaxBatch < 1 {
		return nil, fmt.Errorf("nop: Workers, Slots and MaxBatch must be at least 1, got %d, %d, %d", opts.Workers, opts.Slots, opts.MaxBatch)
	}
	img := m.Arch.InChannels * opts.Height * opts.Width
	classes := m.Arch.Classes
	if classes > img {
		return nil, fmt.Errorf("nop: %d classes exceed the %d values of an image", classes, img)
	}
	e := &engine{}
	for i := 0; i < opts.Workers; i++ {
		w := &Worker{img: img, classes: classes, slots: make([]slot, opts.Slots)}
		for s := range w.slots {
			w.slots[s].out = make([]float32, opts.MaxBatch*classes)
		}
		e.workers = append(e.workers, w)
	}
	return e, nil
}

type engine struct{ workers []backend.Worker }

func (e *engine) Info() backend.Info        { return backend.Info{} }
func (e *engine) Workers() []backend.Worker { return e.workers }
func (e *engine) Sampler() backend.Sampler  { return nil }
func (e *engine) Close() error              { return nil }

type slot struct {
	parts [][]float32
	out   []float32
}

// Worker is the nop back-end's worker.
type Worker struct {
	img, classes int
	slots        []slot
}

func (w *Worker) Bind() func()           { return func() {} }
func (w *Worker) Slots() int             { return len(w.slots) }
func (w *Worker) Output(s int) []float32 { return w.slots[s].out }
func (w *Worker) Device() int            { return 0 }
func (w *Worker) CopyOut(int, int) error { return nil }

func (w *Worker) Wait(int) (backend.Times, error) { return backend.Times{}, nil }

func (w *Worker) CopyIn(s int, parts [][]float32) error {
	w.slots[s].parts = append(w.slots[s].parts[:0], parts...)
	return nil
}

func (w *Worker) Compute(s, n int) error {
	sl := &w.slots[s]
	i := 0
	for _, p := range sl.parts {
		for off := 0; off+w.img <= len(p) && i < n; off += w.img {
			copy(sl.out[i*w.classes:(i+1)*w.classes], p[off:off+w.classes])
			i++
		}
	}
	if i != n {
		return fmt.Errorf("nop: slot holds %d images, asked to compute %d", i, n)
	}
	return nil
}

// Package nop is a zero-cost back-end: its "model" copies the first Classes input
// values of every image to that image's logits and does nothing else. It measures
// what the server itself costs per request, and lets tests check that every
// response carries its own request's data. Its workers take uint8 input too
// (backend.Uint8Worker), as a GPU back-end does, normalising only the values
// they copy.
//
// Importing the package registers the back-end as "nop" (backend.Register).
package nop

import (
	"fmt"
	"math"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

func init() { backend.Register(New()) }

// New returns the zero-cost back-end.
func New() backend.Backend { return nopBackend{} }

type nopBackend struct{}

func (nopBackend) Name() string { return "nop" }

func (nopBackend) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	if opts.Workers < 1 || opts.Slots < 1 || opts.MaxBatch < 1 || opts.Height < 1 || opts.Width < 1 {
		return nil, fmt.Errorf("nop: Workers, Slots, MaxBatch, Height and Width must be at least 1, got %d, %d, %d, %d, %d",
			opts.Workers, opts.Slots, opts.MaxBatch, opts.Height, opts.Width)
	}
	classes := m.Arch.Classes
	img, ok := product(m.Arch.InChannels, opts.Height, opts.Width)
	if !ok {
		return nil, fmt.Errorf("nop: an image of %d x %d x %d values is too large", m.Arch.InChannels, opts.Height, opts.Width)
	}
	if classes > img {
		return nil, fmt.Errorf("nop: %d classes exceed the %d values of an image", classes, img)
	}
	if _, ok := product(opts.MaxBatch, classes); !ok {
		return nil, fmt.Errorf("nop: MaxBatch %d x %d classes of logits is too large", opts.MaxBatch, classes)
	}
	e := &engine{}
	for i := 0; i < opts.Workers; i++ {
		w := &worker{img: img, classes: classes, slots: make([]slot, opts.Slots),
			plane: opts.Height * opts.Width, table: opts.Normalization.Table()}
		for s := range w.slots {
			w.slots[s].out = make([]float32, opts.MaxBatch*classes)
		}
		e.workers = append(e.workers, w)
	}
	return e, nil
}

// product returns the product of non-negative factors and whether it fits in
// an int.
func product(factors ...int) (int, bool) {
	p := 1
	for _, f := range factors {
		if f != 0 && p > math.MaxInt/f {
			return 0, false
		}
		p *= f
	}
	return p, true
}

type engine struct{ workers []backend.Worker }

func (e *engine) Info() backend.Info        { return backend.Info{} }
func (e *engine) Workers() []backend.Worker { return e.workers }
func (e *engine) Sampler() backend.Sampler  { return nil }
func (e *engine) Close() error              { return nil }

type slot struct {
	parts [][]float32
	bytes [][]uint8 // uint8 input, when uint8 is set
	uint8 bool
	out   []float32
}

type worker struct {
	img, classes int
	slots        []slot
	plane        int            // pixels per image channel
	table        [][256]float32 // Options.Normalization, per channel
}

func (w *worker) Bind() (func(), error)  { return func() {}, nil }
func (w *worker) Slots() int             { return len(w.slots) }
func (w *worker) Output(s int) []float32 { return w.slots[s].out }
func (w *worker) Device() int            { return 0 }
func (w *worker) CopyOut(int, int) error { return nil }

func (w *worker) Wait(int) (backend.Times, error) { return backend.Times{}, nil }

func (w *worker) CopyIn(s int, parts [][]float32) error {
	w.slots[s].parts = append(w.slots[s].parts[:0], parts...)
	w.slots[s].uint8 = false
	return nil
}

// CopyInUint8 keeps the uint8 parts for Compute (backend.Uint8Worker).
func (w *worker) CopyInUint8(s int, parts [][]uint8) error {
	w.slots[s].bytes = append(w.slots[s].bytes[:0], parts...)
	w.slots[s].uint8 = true
	return nil
}

func (w *worker) Compute(s, n int) error {
	sl := &w.slots[s]
	if sl.uint8 {
		return w.computeUint8(sl, n)
	}
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

// computeUint8 is Compute for uint8 input: each logit is the normalised
// value of the image's byte (backend.Normalization's arithmetic).
func (w *worker) computeUint8(sl *slot, n int) error {
	i := 0
	for _, p := range sl.bytes {
		for off := 0; off+w.img <= len(p) && i < n; off += w.img {
			for k := range w.classes {
				sl.out[i*w.classes+k] = w.table[(k/w.plane)%len(w.table)][p[off+k]]
			}
			i++
		}
	}
	if i != n {
		return fmt.Errorf("nop: slot holds %d images, asked to compute %d", i, n)
	}
	return nil
}

// RegisterHost does nothing: the nop back-end reads inputs where they are.
func (e *engine) RegisterHost([]byte) (func() error, error) { return func() error { return nil }, nil }

var _ backend.HostRegistrar = (*engine)(nil)

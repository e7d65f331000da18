package inference_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
)

// faulty wraps the nop back-end with faults a test injects. Nothing applies
// until armed is set (after New's first inference), except bindErr.
type faulty struct {
	armed atomic.Bool
	// lost makes every back-end step fail with backend.ErrDeviceLost.
	lost atomic.Bool
	// gate, if set, holds every Compute until it is closed.
	gate chan struct{}
	// computing, if set, receives a value when a Compute starts (blocking).
	computing chan struct{}
	// readUntil, if set, makes Compute read its input over and over after
	// signalling computing until readUntil is closed, then once more, then
	// set computed.
	readUntil chan struct{}
	computed  atomic.Bool
	// computeTime, if set, is how long each Compute takes (time.Sleep).
	computeTime atomic.Int64
	// bindErr, if set, is called on every Bind with the worker index and
	// the number of that worker's earlier binds; a non-nil result fails it.
	bindErr func(worker, earlier int) error
}

func (f *faulty) Name() string { return "faulty" }

func (f *faulty) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	e, err := nop.New().Open(m, opts)
	if err != nil {
		return nil, err
	}
	ws := e.Workers()
	for i, w := range ws {
		ws[i] = &faultyWorker{Worker: w, f: f, id: i, parts: make([][][]float32, opts.Slots)}
	}
	return e, nil
}

type faultyWorker struct {
	backend.Worker
	f     *faulty
	id    int
	mu    sync.Mutex
	binds int
	parts [][][]float32 // per slot
}

var errLost = fmt.Errorf("injected: %w", backend.ErrDeviceLost)

func (w *faultyWorker) Bind() (func(), error) {
	w.mu.Lock()
	n := w.binds
	w.binds++
	w.mu.Unlock()
	if w.f.bindErr != nil {
		if err := w.f.bindErr(w.id, n); err != nil {
			return nil, err
		}
	}
	return w.Worker.Bind()
}

func (w *faultyWorker) lost() bool { return w.f.armed.Load() && w.f.lost.Load() }

func (w *faultyWorker) CopyIn(s int, parts [][]float32) error {
	if w.lost() {
		return errLost
	}
	w.parts[s] = parts
	return w.Worker.CopyIn(s, parts)
}

func (w *faultyWorker) Compute(s, n int) error {
	f := w.f
	if !f.armed.Load() {
		return w.Worker.Compute(s, n)
	}
	if f.lost.Load() {
		return errLost
	}
	if f.computing != nil {
		f.computing <- struct{}{}
	}
	if f.gate != nil {
		<-f.gate
	}
	if d := f.computeTime.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if f.readUntil != nil {
		var sum float32
		for done := false; !done; {
			select {
			case <-f.readUntil:
				done = true
			default:
			}
			for _, p := range w.parts[s] {
				for _, v := range p {
					sum += v
				}
			}
		}
		f.computed.Store(sum == sum) // always true; keeps the reads
	}
	return w.Worker.Compute(s, n)
}

func (w *faultyWorker) CopyOut(s, n int) error {
	if w.lost() {
		return errLost
	}
	return w.Worker.CopyOut(s, n)
}

func (w *faultyWorker) Wait(s int) (backend.Times, error) {
	if w.lost() {
		return backend.Times{}, errLost
	}
	return w.Worker.Wait(s)
}

// faultyServer serves the tiny model at 32x32 on f, arming f once New returns.
func faultyServer(t testing.TB, f *faulty, cfg inference.Config) *inference.Server {
	t.Helper()
	cfg.Backend = f
	cfg.Model = tinyModel(t)
	cfg.Height, cfg.Width = 32, 32
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 4
	}
	s, err := inference.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	f.armed.Store(true)
	return s
}

// within fails the test unless ch closes within d.
func within(t testing.TB, d time.Duration, ch <-chan struct{}, what string) bool {
	t.Helper()
	select {
	case <-ch:
		return true
	case <-time.After(d):
		t.Errorf("%s: not within %v", what, d)
		return false
	}
}

// isLost reports whether err says a device was lost.
func isLost(err error) bool { return errors.Is(err, backend.ErrDeviceLost) }

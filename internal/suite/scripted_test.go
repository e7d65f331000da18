package suite

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
)

// scripted is the nop back-end on a script of compute times, for tests on
// the clock of a synctest bubble: the k-th compute call (k from 0, the first
// inference New runs) takes compute(k). Its sampler notes how many computes
// had run when it was first started.
type scripted struct {
	compute     func(k int) time.Duration
	computes    atomic.Int64
	sampled     atomic.Bool
	sampledFrom atomic.Int64
}

func (s *scripted) Name() string { return "scripted" }

func (s *scripted) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	e, err := nop.New().Open(m, opts)
	if err != nil {
		return nil, err
	}
	se := &scriptedEngine{Engine: e, s: s}
	for _, w := range e.Workers() {
		se.workers = append(se.workers, &scriptedWorker{Worker: w, s: s})
	}
	return se, nil
}

type scriptedEngine struct {
	backend.Engine
	s       *scripted
	workers []backend.Worker
}

func (e *scriptedEngine) Workers() []backend.Worker { return e.workers }
func (e *scriptedEngine) Sampler() backend.Sampler  { return scriptedSampler{e.s} }

type scriptedSampler struct{ s *scripted }

func (p scriptedSampler) Start() error {
	if p.s.sampled.CompareAndSwap(false, true) {
		p.s.sampledFrom.Store(p.s.computes.Load())
	}
	return nil
}

func (p scriptedSampler) Stop() (backend.Utilization, error) { return backend.Utilization{}, nil }

type scriptedWorker struct {
	backend.Worker
	s *scripted
}

func (w *scriptedWorker) Compute(slot, n int) error {
	k := int(w.s.computes.Add(1) - 1)
	if w.s.compute != nil {
		time.Sleep(w.s.compute(k))
	}
	return w.Worker.Compute(slot, n)
}

// scriptedServer serves the tiny model at 32x32 on sc.
func scriptedServer(t testing.TB, sc *scripted, cfg inference.Config) *inference.Server {
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	cfg.Backend, cfg.Model = sc, m
	cfg.Height, cfg.Width = 32, 32
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 4
	}
	s, err := inference.New(cfg)
	require.NoError(t, err)
	return s
}

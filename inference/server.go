package inference

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/metrics"
	"github.com/inferbench/inferbench/inference/resnet"
)

// Server serves one model on one back-end. Its methods are safe for concurrent use.
type Server struct {
	cfg      Config
	model    *resnet.Model
	eng      backend.Engine
	workers  []backend.Worker
	channels int
	classes  int
	imgSize  int // values per image
	warm     Warmup
	info     backend.Info

	queue   chan *Call
	batches chan *batch // merged batches, when dynamic batching is on
	quit    chan struct{}

	mu         sync.Mutex
	closed     bool
	submitters sync.WaitGroup // Submit calls between the closed check and the enqueue
	pending    sync.WaitGroup // accepted calls not yet answered
	inflight   map[*batch]struct{}
	goroutines sync.WaitGroup
	closeOnce  sync.Once
	closeErr   error

	live      atomic.Int32 // workers in service
	downCause atomic.Pointer[error]

	gpu      bool          // the back-end runs on GPUs (trace processes per device)
	ids      atomic.Uint64 // request numbers
	counts   counters
	rec      metrics.Recorder
	batchBuf sync.Pool
}

// Warmup is the time New spent before the server could answer, in parts.
type Warmup struct {
	Load  time.Duration // building or loading the model
	Setup time.Duration // the back-end's Open: memory, plans, algorithm search, graphs
	First time.Duration // one batch-1 inference through every worker
	// Parts is the back-end's own breakdown of Setup.
	Parts []backend.Part
}

// Total is Load + Setup + First.
func (w Warmup) Total() time.Duration { return w.Load + w.Setup + w.First }

// New builds the model, opens the back-end, runs a first inference on every
// worker and starts serving. Close or Shutdown releases it.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	be := cfg.Backend
	if be == nil {
		if be, err = BackendByName(cfg.Device); err != nil {
			return nil, err
		}
	}
	s := &Server{cfg: cfg, quit: make(chan struct{}), inflight: make(map[*batch]struct{}), gpu: be.Name() == "cuda"}
	start := time.Now()
	if s.model, err = loadModel(cfg); err != nil {
		return nil, err
	}
	s.warm.Load = time.Since(start)
	s.channels, s.classes = s.model.Arch.InChannels, s.model.Arch.Classes
	s.imgSize = s.channels * cfg.Height * cfg.Width

	start = time.Now()
	s.eng, err = be.Open(s.model, backend.Options{
		Workers: cfg.Workers, Slots: cfg.Slots, MaxBatch: cfg.MaxBatch,
		Height: cfg.Height, Width: cfg.Width, Pipeline: cfg.Pipeline,
		Precision: cfg.Precision, Graphs: cfg.Graphs, Devices: cfg.Devices, Batches: cfg.Batches,
		PinnedInput: cfg.PinnedInput,
	})
	if err != nil {
		return nil, fmt.Errorf("inference: opening %s back-end: %w", be.Name(), err)
	}
	s.warm.Setup = time.Since(start)
	s.info = s.eng.Info()
	s.warm.Parts = s.info.Setup
	s.workers = s.eng.Workers()
	if len(s.workers) != cfg.Workers {
		s.eng.Close()
		return nil, fmt.Errorf("inference: %s back-end made %d workers, want %d", be.Name(), len(s.workers), cfg.Workers)
	}

	start = time.Now()
	if err := s.firstInference(); err != nil {
		s.eng.Close()
		return nil, err
	}
	s.warm.First = time.Since(start)

	s.queue = make(chan *Call, cfg.MaxQueue)
	s.live.Store(int32(len(s.workers)))
	if cfg.MaxQueueDelay > 0 {
		s.batches = make(chan *batch)
		s.goroutines.Add(1)
		go s.batcher()
	}
	for i, w := range s.workers {
		s.startWorker(i, w)
	}
	return s, nil
}

func loadModel(cfg Config) (*resnet.Model, error) {
	switch {
	case cfg.Model != nil:
		return cfg.Model, nil
	case cfg.Checkpoint != "":
		return loadCheckpoint(cfg.Checkpoint)
	}
	return resnet.New(resnet.ResNet18(), cfg.Seed)
}

// firstInference runs one batch-1 inference of zeros through every worker.
func (s *Server) firstInference() error {
	zeros := make([]float32, s.imgSize)
	for i, w := range s.workers {
		err := func() error {
			release := w.Bind()
			defer release()
			if err := w.CopyIn(0, [][]float32{zeros}); err != nil {
				return err
			}
			if err := w.Compute(0, 1); err != nil {
				return err
			}
			if err := w.CopyOut(0, 1); err != nil {
				return err
			}
			_, err := w.Wait(0)
			return err
		}()
		if err != nil {
			return fmt.Errorf("inference: first inference on worker %d: %w", i, err)
		}
	}
	return nil
}

// Warmup returns how long New took, in parts.
func (s *Server) Warmup() Warmup { return s.warm }

// Info returns the back-end's description of its device (config lines).
func (s *Server) Info() backend.Info { return s.info }

// Config returns the server's configuration with defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Classes is the number of logits per image.
func (s *Server) Classes() int { return s.classes }

// Sampler returns the back-end's utilisation sampler, or nil.
func (s *Server) Sampler() backend.Sampler { return s.eng.Sampler() }

// AllocInput returns an input tensor of n images in memory the back-end copies
// from directly (pinned host memory on CUDA), or in ordinary memory when the
// back-end has no such memory. Release it with FreeInput after its last use.
func (s *Server) AllocInput(n int) (Tensor, error) {
	shape := []int{n, s.channels, s.cfg.Height, s.cfg.Width}
	if a, ok := s.eng.(backend.Allocator); ok {
		data, err := a.AllocHost(n * s.imgSize)
		if err != nil {
			return Tensor{}, fmt.Errorf("inference: allocating input: %w", err)
		}
		return Tensor{Shape: shape, Data: data}, nil
	}
	return Tensor{Shape: shape, Data: make([]float32, n*s.imgSize)}, nil
}

// FreeInput releases a tensor from AllocInput.
func (s *Server) FreeInput(t Tensor) error {
	if a, ok := s.eng.(backend.Allocator); ok {
		return a.FreeHost(t.Data)
	}
	return nil
}

// Ready reports whether at least one worker is in service; when none is, it
// returns the cause.
func (s *Server) Ready() (bool, error) {
	if s.live.Load() > 0 {
		return true, nil
	}
	if p := s.downCause.Load(); p != nil {
		return false, *p
	}
	return false, ErrNoWorker
}

// Shutdown stops admission (new requests get ErrServerClosed), waits until every
// accepted request has been answered, then stops the workers and releases the
// back-end. If ctx ends first, it calls Close and returns ctx's error.
// It is safe to call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	drained := make(chan struct{})
	go func() {
		s.submitters.Wait()
		s.pending.Wait()
		close(drained)
	}()
	select {
	case <-drained:
		return s.Close()
	case <-ctx.Done():
		s.Close()
		<-drained
		return ctx.Err()
	}
}

// Close stops admission, fails every request not yet answered with
// ErrServerClosed, waits for the workers to leave the batch they are running,
// and releases the back-end. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.quit)
		s.submitters.Wait()
		s.failQueued(ErrServerClosed)
		s.mu.Lock()
		for b := range s.inflight {
			for _, c := range b.calls {
				s.finish(c, nil, ErrServerClosed)
			}
		}
		s.mu.Unlock()
		s.goroutines.Wait()
		s.failQueued(ErrServerClosed)
		s.closeErr = s.eng.Close()
	})
	return s.closeErr
}

// failQueued answers every queued request with err.
func (s *Server) failQueued(err error) {
	for {
		select {
		case c := <-s.queue:
			s.finish(c, nil, err)
		default:
			return
		}
	}
}

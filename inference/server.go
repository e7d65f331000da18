package inference

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/switches"
	"github.com/inferbench/inferbench/inference/metrics"
	"github.com/inferbench/inferbench/inference/resnet"
)

// Server serves one model on one back-end. Its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	model   *resnet.Model
	eng     backend.Engine
	workers []backend.Worker
	lanes   []*lane // one per worker
	geom    geometry
	classes int
	// deviceUint8 says every worker is a backend.Uint8Worker: uint8 inputs
	// go to the device as bytes. Otherwise Submit normalises them on the host
	// with table (Config.Normalization).
	deviceUint8 bool
	table       [][256]float32
	// deviceIO says the back-end reads inputs from and writes logits to
	// device memory from OpenIPC (see DeviceIO).
	deviceIO    bool
	backendName string
	warm        Warmup
	info        backend.Info

	queue   *requestQueue
	batches chan *batch   // merged batches, when dynamic batching is on
	quit    chan struct{} // closed by Close: workers and batcher stop
	down    chan struct{} // closed when the last worker left service

	mu       sync.Mutex
	inflight map[*batch]struct{} // batches workers are running, for Close

	goroutines sync.WaitGroup
	closeOnce  sync.Once
	closeErr   error

	live      atomic.Int32 // workers in service
	downCause atomic.Pointer[error]

	ids    atomic.Uint64 // request numbers
	counts counters
	rec    *metrics.Recorder // latency and stage figures, one shard per worker
	pool   batchPool
}

// Warmup is the time New spent before the server could answer, in the three
// phases of the warm-up vocabulary (see package backend), each measured on the
// host's monotonic clock.
type Warmup struct {
	// Load is building the model (Config.Arch) or reading its checkpoint;
	// near 0 when Config.Model was given.
	Load time.Duration
	// Setup is the back-end's Open (memory, plans, algorithm search, graphs)
	// less the first inferences it runs, which count in First.
	Setup time.Duration
	// First is the device's first inferences: those the back-end ran inside
	// Open (its part backend.PartFirst, if any) plus one batch-1 inference
	// through every worker after Open.
	First time.Duration
	// Parts are the back-end's own steps of Open (backend.Info.Setup); all but
	// backend.PartFirst and the sub-steps (named "step.sub") add up to at
	// most Setup.
	Parts []backend.Part
}

// Total is Load + Setup + First.
func (w Warmup) Total() time.Duration { return w.Load + w.Setup + w.First }

// New builds or loads the model, opens the back-end, runs a first inference on
// every worker and starts serving. Close or Shutdown releases it.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	be := cfg.Backend
	if be == nil {
		if be, err = backend.Lookup(cfg.BackendName); err != nil {
			return nil, fmt.Errorf("inference: %w", err)
		}
	}
	switch {
	case cfg.Model != nil:
		err = cfg.checkBatchValues(cfg.Model.Arch.InChannels)
	case cfg.Checkpoint == "":
		err = cfg.checkBatchValues(cfg.Arch.InChannels)
	}
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, quit: make(chan struct{}), down: make(chan struct{}),
		inflight: make(map[*batch]struct{}),
	}
	s.queue = newRequestQueue(cfg.MaxQueue, cfg.QueuePolicy, s.dropped)

	opts := cfg.Options
	if st, ok := be.(backend.Starter); ok {
		// The back-end's driver and contexts start while the model loads.
		stop := st.Start(opts)
		defer stop()
	}
	start := time.Now()
	if s.model, err = loadModel(cfg); err != nil {
		return nil, err
	}
	s.warm.Load = time.Since(start)
	arch := s.model.Arch
	if err := cfg.checkBatchValues(arch.InChannels); err != nil {
		return nil, err
	}
	s.classes = arch.Classes
	s.geom = geometry{channels: arch.InChannels, height: cfg.Height, width: cfg.Width, maxBatch: cfg.MaxBatch, rejectNonFinite: cfg.RejectNonFinite}

	start = time.Now()
	s.eng, err = be.Open(s.model, opts)
	if err != nil {
		return nil, fmt.Errorf("inference: opening %s back-end: %w", be.Name(), err)
	}
	s.warm.Setup = time.Since(start)
	s.info = s.eng.Info()
	if set := switches.Set(); len(set) > 0 {
		// Copied: the engine's slice is its own.
		s.info.Config = append(slices.Clip(s.info.Config), backend.KV{Key: "switches", Value: strings.Join(set, " ")})
	}
	s.warm.Parts = s.info.Setup
	s.workers = s.eng.Workers()
	s.deviceUint8 = true
	for _, w := range s.workers {
		if _, ok := w.(backend.Uint8Worker); !ok {
			s.deviceUint8 = false
		}
	}
	if !s.deviceUint8 {
		s.table = cfg.Normalization.Table()
	}
	s.deviceIO, s.backendName = supportsDeviceIO(s.eng, s.workers), be.Name()
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
	for _, p := range s.warm.Parts {
		if p.Name == backend.PartFirst && p.Time <= s.warm.Setup {
			s.warm.Setup -= p.Time
			s.warm.First += p.Time
		}
	}

	s.rec = metrics.NewRecorder(len(s.workers))
	s.live.Store(int32(len(s.workers)))
	if cfg.MaxQueueDelay > 0 {
		s.batches = make(chan *batch)
		s.goroutines.Add(1)
		go batcher{s}.run()
	}
	for i, w := range s.workers {
		l := &lane{s: s, id: i, w: w, shard: s.rec.Shard(i)}
		s.lanes = append(s.lanes, l)
		if cfg.Pipeline == Overlap {
			newOverlapWorker(l).start()
		} else {
			s.goroutines.Add(1)
			go serialWorker{l}.run()
		}
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
	m, err := resnet.New(cfg.Arch, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("inference: %w", err)
	}
	return m, nil
}

// firstInference runs one batch-1 inference of zeros through every worker.
func (s *Server) firstInference() error {
	zeros := make([]float32, s.geom.channels*s.geom.height*s.geom.width)
	for i, w := range s.workers {
		err := func() error {
			release, err := w.Bind()
			if err != nil {
				return fmt.Errorf("bind: %w", err)
			}
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
			_, err = w.Wait(0)
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

// Info returns the back-end's description of its device (config lines), with
// the config line "switches" listing the environment switches set
// (internal/switches), if any.
func (s *Server) Info() backend.Info { return s.info }

// Config returns the server's configuration with defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Uint8OnDevice reports whether uint8 inputs reach the back-end as bytes,
// normalised on the device with Config.Normalization (every worker is a
// backend.Uint8Worker); otherwise Submit normalises them on the host.
func (s *Server) Uint8OnDevice() bool { return s.deviceUint8 }

// Classes is the number of logits per image.
func (s *Server) Classes() int { return s.classes }

// Arch is the architecture of the model the server runs.
func (s *Server) Arch() resnet.Arch { return s.model.Arch }

// Weights says which weights the server runs: "checkpoint NAME" (the base
// name of Config.Checkpoint); for the model New builds, "seeded random
// (torchvision initialisation, seed N): logits are no classification";
// "given by the program (inference.Config.Model)" otherwise.
func (s *Server) Weights() string {
	switch {
	case s.cfg.Model != nil:
		return "given by the program (inference.Config.Model)"
	case s.cfg.Checkpoint != "":
		return "checkpoint " + filepath.Base(s.cfg.Checkpoint)
	}
	return fmt.Sprintf("seeded random (torchvision initialisation, seed %d): logits are no classification", s.cfg.Seed)
}

// Sampler returns the back-end's utilisation sampler, or nil.
func (s *Server) Sampler() backend.Sampler { return s.eng.Sampler() }

// AllocInput returns an input tensor of n images in memory the back-end copies
// from directly (pinned host memory on CUDA), or in ordinary memory when the
// back-end has no such memory. Release it with FreeInput after its last use.
func (s *Server) AllocInput(n int) (Tensor, error) {
	g := &s.geom
	shape := []int{n, g.channels, g.height, g.width}
	size := n * g.channels * g.height * g.width
	if a, ok := s.eng.(backend.Allocator); ok {
		data, err := a.AllocHost(size)
		if err != nil {
			return Tensor{}, fmt.Errorf("inference: allocating input: %w", err)
		}
		return Tensor{Shape: shape, Data: data}, nil
	}
	return Tensor{Shape: shape, Data: make([]float32, size)}, nil
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

// Submit validates req and queues it, and returns at once with a Call that
// will be answered exactly once. If the queue is full it waits (Block) or fails
// with ErrQueueFull (Reject).
//
// An error means the request was not accepted and will not be answered (Stats
// counts it as Rejected): an *InputError; ErrQueueFull; ErrServerClosed;
// ErrNoWorker (wrapping the last worker's cause); ctx's error when ctx has
// ended, or context.DeadlineExceeded when the request's deadline (Sent +
// Timeout, or ctx's deadline) is not after the time of the call, whatever
// the queue holds; or, for a nil ctx, an error saying so.
//
// Cancelling ctx later abandons the request: while it is queued it leaves
// the queue at once and is answered with ctx's error; once its batch runs, its
// result is discarded. No goroutine per request waits for ctx.
func (s *Server) Submit(ctx context.Context, req Request) (*Call, error) {
	if gatePlant {
		plantSubmit()
	}
	if ctx == nil {
		s.counts.rejected.Add(1)
		return nil, errNilContext
	}
	if err := s.geom.check(&req.Input); err != nil {
		s.counts.rejected.Add(1)
		return nil, err
	}
	n := req.Input.Shape[0]
	if req.Logits != nil && len(req.Logits) != n*s.classes {
		s.counts.rejected.Add(1)
		return nil, &InputError{Field: "logits buffer", Want: fmt.Sprintf("%d values", n*s.classes), Got: fmt.Sprintf("%d", len(req.Logits))}
	}
	if err := s.checkDevice(&req, n); err != nil {
		s.counts.rejected.Add(1)
		return nil, err
	}
	now := time.Now()
	sent := req.Sent
	if sent.IsZero() {
		sent = now
	}
	timeout := s.cfg.Timeout
	if req.Timeout > 0 {
		timeout = req.Timeout
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = sent.Add(timeout)
	}
	if err := expired(ctx, deadline, now); err != nil {
		s.counts.rejected.Add(1)
		return nil, err
	}
	c := &Call{ctx: ctx, in: req.Input.Data, n: n, done: make(chan struct{}), dev: req.Input.Device, devOut: req.DeviceLogits}
	if c.dev.IsZero() && req.Input.Datatype == Uint8 {
		if s.deviceUint8 {
			c.in, c.bytes = nil, req.Input.Bytes
		} else {
			c.in = make([]float32, len(req.Input.Bytes))
			backend.Widen(c.in, req.Input.Bytes, s.table, s.geom.height*s.geom.width)
		}
	}
	c.devUint8 = !c.dev.IsZero() && req.Input.Datatype == Uint8
	c.resp.Logits.Data = req.Logits
	c.resp.Timing.Sent, c.resp.Timing.Admitted = sent, now
	c.resp.Timing.ID = s.ids.Add(1)
	if timeout > 0 {
		c.ctx, c.cancel = context.WithDeadline(ctx, deadline)
	}
	if err := s.queue.push(c); err != nil {
		s.counts.rejected.Add(1)
		c.release()
		return nil, err
	}
	s.counts.accepted.Add(1)
	return c, nil
}

// expired returns ctx's error, or context.DeadlineExceeded when deadline (if
// set) or ctx's deadline is not after now: the outcome of a request at
// admission depends on the clock reading now, not on which timer has fired.
func expired(ctx context.Context, deadline, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !d.After(now) {
		return context.DeadlineExceeded
	}
	if !deadline.IsZero() && !deadline.After(now) {
		return context.DeadlineExceeded
	}
	return nil
}

// Infer submits in and waits for its logits. If ctx ends first, Infer returns
// ctx's error and the server discards the result.
//
// Infer returns only once the server no longer reads in, so the caller may
// reuse it at once: a request still queued when ctx ends leaves the queue at
// once; one a worker (or, with dynamic batching, the batcher) has taken is
// waited for until it is dropped before its batch runs, or until the back-end
// has finished reading its batch (Wait returned or the batch failed).
func (s *Server) Infer(ctx context.Context, in Tensor) (*Response, error) {
	c, err := s.Submit(ctx, Request{Input: in})
	if err != nil {
		return nil, err
	}
	select {
	case <-c.done:
		c.reading.Wait() // at once, unless Close answered c while its batch runs
		return c.Result()
	case <-ctx.Done():
		c.reading.Wait()
		return nil, ctx.Err()
	}
}

// dropped answers a call that left the queue because its context ended.
func (s *Server) dropped(c *Call) {
	c.reading.Done()
	s.finish(c, nil, c.ctx.Err())
}

// outOfService takes worker id out of service for err. When it was the last
// one, the server can answer nothing more: admission stops, every queued call
// fails with ErrNoWorker wrapping the cause, and down closes (the batcher then
// answers the calls it holds).
func (s *Server) outOfService(id int, err error) {
	cause := error(&WorkerError{Worker: id, Err: err})
	s.downCause.Store(&cause)
	if s.live.Add(-1) > 0 {
		return
	}
	noWorker := fmt.Errorf("%w: %w", ErrNoWorker, cause)
	for _, c := range s.queue.fail(noWorker, noWorker) {
		c.reading.Done()
		s.finish(c, nil, noWorker)
	}
	close(s.down)
}

// Shutdown stops admission (new requests get ErrServerClosed), waits until every
// accepted request has been answered, then stops the workers and releases the
// back-end. If ctx ends first, it calls Close and returns ctx's error.
// It is safe to call more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	s.queue.stop(ErrServerClosed)
	drained := make(chan struct{})
	go func() {
		s.queue.pending.Wait()
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
// ErrServerClosed, waits for the workers to leave the batch they are running
// (from then on the server reads no request's input), and releases the
// back-end. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		for _, c := range s.queue.fail(ErrServerClosed, ErrServerClosed) {
			c.reading.Done()
			s.finish(c, nil, ErrServerClosed)
		}
		close(s.quit)
		s.mu.Lock()
		for b := range s.inflight {
			for _, c := range b.calls {
				s.finish(c, nil, ErrServerClosed) // their input is released when the worker leaves b
			}
		}
		s.mu.Unlock()
		s.goroutines.Wait()
		s.closeErr = s.eng.Close()
	})
	return s.closeErr
}

// finish answers c once; later calls do nothing.
func (s *Server) finish(c *Call, logits []float32, err error) {
	if c.claim() {
		s.complete(c, logits, err, nil, nil)
	}
}

// complete answers a claimed call. On success the logits rows are in logits,
// the timing fields are set, and the request's latency and stage times are
// recorded in shard (before the answer, so a caller that sees it answered
// sees it in Stats).
func (s *Server) complete(c *Call, logits []float32, err error, shard *metrics.Shard, stages *[metrics.NumStages]time.Duration) {
	if err == nil {
		if e := c.ctx.Err(); e != nil {
			err = e // abandoned while in flight: discard the result
		}
	}
	switch {
	case err == nil:
		c.resp.Logits = Tensor{Shape: []int{c.n, s.classes}, Data: logits}
		shard.Observe(c.resp.Timing.Latency(), *stages)
	case errors.Is(err, context.Canceled):
		s.counts.cancelled.Add(1)
	case errors.Is(err, context.DeadlineExceeded):
		s.counts.expired.Add(1)
	default:
		s.counts.failed.Add(1)
	}
	c.err = err
	c.release()
	close(c.done)
	s.queue.pending.Done()
}

// Stats returns a snapshot of the server's counters and measurements. It takes
// no lock that completions take and costs a pass over each worker's latency
// buckets.
func (s *Server) Stats() Stats {
	rec := s.rec.Snapshot()
	st := Stats{
		Accepted: s.counts.accepted.Load(), Completed: rec.Latency.Count,
		Failed: s.counts.failed.Load(), Rejected: s.counts.rejected.Load(),
		Cancelled: s.counts.cancelled.Load(), Expired: s.counts.expired.Load(),
		Queued:  s.queue.len(),
		Latency: rec.Latency, Stages: rec.Stages,
	}
	for _, l := range s.lanes {
		st.Batches += l.batches.Load()
		st.Items += l.items.Load()
	}
	return st
}

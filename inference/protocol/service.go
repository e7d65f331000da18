package protocol

import (
	"log/slog"
	"sync"
	"sync/atomic"
)

// Extensions the server may report in its metadata: Triton's binary tensor
// data, model configuration and statistics extensions, its system
// shared-memory extension when Options.SharedMemory turns shared memory on,
// and its CUDA shared-memory extension when, besides, the model's server
// reads GPU memory (Server.DeviceIO: the cuda back-end). See
// Service.Extensions.
var Extensions = []string{"binary_tensor_data", "model_configuration", "statistics", "system_shared_memory", "cuda_shared_memory"}

// DefaultGCPercent is the Go garbage collector target (GOGC) that
// cmd/inferbench serve sets unless GOGC is in its environment, and that
// BenchmarkTransport uses: every request allocates its decoded message and
// its answer, so the default target of 100 spends a large share of a small
// machine's CPU on collection (on 2 cores, gRPC batch-1 requests with 4
// clients ran at about 20,000 req/s with 100 and 25,000 with 400), while the
// heap stays small next to a model's weights.
const DefaultGCPercent = 400

// Options configure a Service.
type Options struct {
	// Name and Version are the server metadata's; "" means "inferbench" and
	// "dev".
	Name, Version string
	// MaxBodyBytes bounds an HTTP request body; 0 means the body of one
	// request of MaxBatch FP32 images in binary form plus 1 MiB of JSON.
	// gRPC messages are bounded by GRPCLimits (NewGRPCServer,
	// GRPCServerOptions), by default by this limit too.
	MaxBodyBytes int64
	// SharedMemory turns on, bounds and fences the shared-memory regions
	// (system and CUDA) clients register; the zero value turns them off.
	SharedMemory SharedMemoryLimits
	// Requests bound what one inference request may declare (tensors,
	// parameters, id and string lengths, nesting); see RequestLimits.
	Requests RequestLimits
	// Log receives what the front door notices but answers no request with
	// (a shared-memory region the back-end could not page-lock); nil means
	// slog.Default().
	Log *slog.Logger
}

// Service is the network front door of one Model: the Open Inference
// Protocol's HTTP/REST API (HTTPHandler), its gRPC API (RegisterGRPC) and
// Prometheus metrics (Collector). Its methods are safe for concurrent use.
type Service struct {
	model    *Model
	opts     Options
	draining atomic.Bool
	drained  chan struct{} // closed by Drain
	drain    sync.Once
	errs     errorCounts
	shm      *shmRegistry
}

// New returns the front door of m.
func New(m *Model, opts Options) *Service {
	if opts.Name == "" {
		opts.Name = "inferbench"
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBody(m)
	}
	opts.Requests = opts.Requests.withDefaults()
	s := &Service{model: m, opts: opts, drained: make(chan struct{})}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	s.opts.Log = opts.Log
	s.shm = newSHMRegistry(opts.SharedMemory, m.srv, opts.Log)
	return s
}

// Extensions are the protocol extensions this Service reports in its server
// metadata: Extensions, less system_shared_memory when it is turned off and
// cuda_shared_memory unless it is supported and on.
func (s *Service) Extensions() []string {
	var out []string
	for _, e := range Extensions {
		if e == "system_shared_memory" && !s.shm.enabled() || e == "cuda_shared_memory" && !s.shm.cudaEnabled() {
			continue
		}
		out = append(out, e)
	}
	return out
}

// DefaultMaxBody is the body of one request of MaxBatch FP32 images in
// binary form plus 1 MiB for its JSON header.
func DefaultMaxBody(m *Model) int64 {
	return int64(m.byteSize(m.maxBatch, FP32)) + 1<<20
}

// MaxBodyBytes is the HTTP body limit in force.
func (s *Service) MaxBodyBytes() int64 { return s.opts.MaxBodyBytes }

// Model is the served model.
func (s *Service) Model() *Model { return s.model }

// Drain makes the server report not ready (HTTP, gRPC and the gRPC health
// service) and refuse new inference requests
// with 503/Unavailable, while requests already accepted are answered. It
// cannot be undone.
func (s *Service) Drain() {
	s.drain.Do(func() {
		s.draining.Store(true)
		close(s.drained)
	})
}

// Draining reports whether Drain was called.
func (s *Service) Draining() bool { return s.draining.Load() }

// Ready reports whether the server takes inference requests: not draining
// and the model's server has a worker in service.
func (s *Service) Ready() bool {
	if s.draining.Load() {
		return false
	}
	ok, _ := s.model.ready()
	return ok
}

// lookup finds the model a request addresses.
func (s *Service) lookup(name, version string) (*Model, error) {
	m := s.model
	if name != m.name {
		return nil, notFound("unknown model %q (this server serves %q)", name, m.name)
	}
	if !m.matches(version) {
		return nil, notFound("unknown version %q of model %q (it has version %q)", version, name, m.version)
	}
	return m, nil
}

// admit fails when the server is draining or has no worker in service.
func (s *Service) admit(m *Model) error {
	if s.draining.Load() {
		return unavailable("inference: server is shutting down")
	}
	if ok, cause := m.ready(); !ok {
		return unavailable("inference: model %s is not ready: %v", m, cause)
	}
	return nil
}

// Close frees the front door's idle buffers and unregisters every
// shared-memory region, system and CUDA (unmapping it). Call it after the transports stopped
// and before shutting the model's server down. The error reports any region
// that could not be unregistered from the back-end or unmapped, then or
// earlier.
func (s *Service) Close() error {
	s.model.inputs.close()
	return s.shm.close()
}

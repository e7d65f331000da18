package inference

import (
	"fmt"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/inference/trace"
)

// Pipeline is how a worker arranges its copy and compute stages.
type Pipeline = backend.Pipeline

// Precision is the arithmetic a back-end computes in.
type Precision = backend.Precision

// The pipelines and precisions, re-exported from package backend.
const (
	Serial  = backend.Serial
	Overlap = backend.Overlap
	FP32    = backend.FP32
	TF32    = backend.TF32
	FP16    = backend.FP16
)

// QueuePolicy says what Submit does when the request queue is full.
type QueuePolicy int

const (
	// Block waits for room until the request's context ends.
	Block QueuePolicy = iota
	// Reject fails at once with ErrQueueFull.
	Reject
)

// String returns "block" or "reject".
func (p QueuePolicy) String() string {
	if p == Reject {
		return "reject"
	}
	return "block"
}

// Defaults used for zero Config fields, and by NewInput.
const (
	DefaultBackend  = "cpu"
	DefaultHeight   = 250
	DefaultWidth    = 250
	DefaultChannels = 3 // RGB, as every torchvision ResNet takes
	DefaultMaxBatch = 256
	DefaultMaxQueue = 1024
	DefaultSeed     = 1
)

// MaxIdlePoll bounds Config.IdlePoll: past it, a thread that looks for work
// burns a CPU for nothing a sleep would not do as well.
const MaxIdlePoll = 10 * time.Millisecond

// Upper bounds New accepts: larger values are configuration mistakes that
// would exhaust memory (buffers are sized by them at start-up) or overflow
// sizes. A program checks its flags against the exported ones before it
// calls New.
const (
	LimitWorkers  = 256     // Config.Workers
	LimitSlots    = 16      // Config.Slots
	LimitMaxBatch = 4096    // Config.MaxBatch
	LimitMaxQueue = 1 << 20 // Config.MaxQueue
	limitSide     = 8192    // Height and Width, pixels
	limitValues   = 1 << 31 // MaxBatch x channels x Height x Width: one slot's input, float32 values
)

// Options are the settings a Server passes to its back-end: Config's
// embedded part (see backend.Options for each field and its default).
type Options = backend.Options

// Config configures a Server. The zero value serves a seeded ResNet-18 on the
// CPU back-end with one worker and the Serial pipeline.
type Config struct {
	// Backend runs the model. If nil, BackendName names a registered one
	// (see backend.Register): "cpu" is built in, "nop" and "cuda" register
	// when their packages are imported; "" means DefaultBackend ("cpu").
	// When Backend is set, New sets BackendName to its Name.
	Backend     backend.Backend
	BackendName string

	// The model. If Model is set, it is served as it is, and Warmup.Load is
	// only the time to take it (near 0: it was built before New). Otherwise,
	// if Checkpoint is set, the model is read from that file; otherwise a
	// network of architecture Arch (the zero value means resnet.ResNet18())
	// with torchvision's initialisation drawn from Seed (DefaultSeed if 0) is
	// built. Either way New times the reading or building as Warmup.Load.
	Model      *resnet.Model
	Checkpoint string
	Arch       resnet.Arch
	Seed       uint64

	// Options are what the back-end receives: the input size, MaxBatch,
	// Batches, Workers, Pipeline, Slots, Precision, Graphs, Convs, Devices,
	// PinnedInput, AlgoCache and Normalization, each documented in
	// backend.Options with the default New gives its zero value.
	Options

	// MaxQueue bounds the requests waiting for a worker; 0 means
	// DefaultMaxQueue. At most 2^20.
	MaxQueue int
	// QueuePolicy is what Submit does when the queue is full; zero is Block.
	QueuePolicy QueuePolicy
	// Timeout, if positive, is the default deadline of a request, counted from
	// its send time; Request.Timeout overrides it.
	Timeout time.Duration
	// RejectNonFinite makes Submit check every input value and reject NaN and
	// ±Inf with an *InputError (it costs a pass over the data).
	RejectNonFinite bool

	// MaxQueueDelay enables dynamic batching when positive: requests are merged
	// into one batch of at most MaxBatch images, waiting at most this long for
	// company. PreferredBatches, if set, are sizes at which a batch is sent at
	// once without waiting.
	MaxQueueDelay    time.Duration
	PreferredBatches []int

	// IdlePoll, if positive, is how long a worker that finds the queue empty
	// keeps looking at it before it sleeps, and how long the front door
	// (package protocol) looks for a call's answer before it sleeps: a request
	// arriving meanwhile is taken, and an answer seen, without waking a thread,
	// which on a GPU worker (a goroutine locked to its thread) costs tens of
	// microseconds. Each looking goroutine keeps a CPU busy for up to IdlePoll
	// after its last request, and a goroutine it makes ready waits for another
	// thread to take it: worth it for one-at-a-time requests from another
	// process, not for a caller in this one that sleeps on its answer. At most MaxIdlePoll; 0 (the default) sleeps at once.
	IdlePoll time.Duration

	// Trace, if set, receives the timeline of every executed batch (queue
	// wait, copy-in, compute, copy-out, delivery per request); write it with
	// Trace.WriteFile and open it in Perfetto or chrome://tracing.
	Trace *trace.Recorder
}

// withDefaults returns c with zero fields filled, or an error for invalid ones.
// (Normalization is checked against the model's channels by New.)
func (c Config) withDefaults() (Config, error) {
	if c.BackendName == "" {
		c.BackendName = DefaultBackend
	}
	if c.Normalization.IsZero() {
		c.Normalization = ImageNet
	}
	if c.Backend != nil {
		c.BackendName = c.Backend.Name()
	}
	if c.Model == nil && c.Checkpoint == "" && isZeroArch(c.Arch) {
		c.Arch = resnet.ResNet18()
	}
	if c.Height == 0 {
		c.Height = DefaultHeight
	}
	if c.Width == 0 {
		c.Width = DefaultWidth
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.Workers == 0 {
		c.Workers = 1
	}
	if c.Slots == 0 {
		c.Slots = 1
		if c.Pipeline == Overlap {
			c.Slots = 3
		}
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
	if len(c.Batches) == 0 {
		c.Batches = []int{1}
	}
	for _, f := range []struct {
		name       string
		value, max int
	}{
		{"Height", c.Height, limitSide},
		{"Width", c.Width, limitSide},
		{"MaxBatch", c.MaxBatch, LimitMaxBatch},
		{"Workers", c.Workers, LimitWorkers},
		{"Slots", c.Slots, LimitSlots},
		{"MaxQueue", c.MaxQueue, LimitMaxQueue},
	} {
		if f.value < 0 || f.value > f.max {
			return c, fmt.Errorf("inference: Config.%s = %d, want 1..%d", f.name, f.value, f.max)
		}
	}
	switch {
	case c.Pipeline != Serial && c.Pipeline != Overlap:
		return c, fmt.Errorf("inference: unknown pipeline %v", c.Pipeline)
	case c.QueuePolicy != Block && c.QueuePolicy != Reject:
		return c, fmt.Errorf("inference: unknown queue policy %d", int(c.QueuePolicy))
	case c.MaxQueueDelay < 0:
		return c, fmt.Errorf("inference: MaxQueueDelay %v is negative", c.MaxQueueDelay)
	case c.IdlePoll < 0 || c.IdlePoll > MaxIdlePoll:
		return c, fmt.Errorf("inference: IdlePoll %v outside 0..%v", c.IdlePoll, MaxIdlePoll)
	}
	if err := resnet.CheckInput(c.Height, c.Width); err != nil {
		return c, fmt.Errorf("inference: %w", err)
	}
	for _, b := range append(append([]int(nil), c.Batches...), c.PreferredBatches...) {
		if b < 1 || b > c.MaxBatch {
			return c, fmt.Errorf("inference: batch size %d outside 1..MaxBatch (%d)", b, c.MaxBatch)
		}
	}
	return c, nil
}

// checkBatchValues fails when MaxBatch images of channels x Height x Width
// exceed limitValues (MaxBatch, Height and Width are within their limits, so
// their product does not overflow).
func (c Config) checkBatchValues(channels int) error {
	if !c.Normalization.IsZero() {
		if err := c.Normalization.Check(channels); err != nil {
			return fmt.Errorf("inference: Config.Normalization: %w", err)
		}
	}
	if channels < 1 || c.MaxBatch*c.Height*c.Width > limitValues/channels {
		return fmt.Errorf("inference: Config.MaxBatch x channels x Height x Width = %d x %d x %d x %d values, want at most %d",
			c.MaxBatch, channels, c.Height, c.Width, limitValues)
	}
	return nil
}

func isZeroArch(a resnet.Arch) bool {
	return a.InChannels == 0 && a.Stem == 0 && a.Widths == nil && a.Blocks == nil && a.Classes == 0
}

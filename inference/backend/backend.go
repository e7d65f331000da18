// Package backend is the seam between the server and the devices that run a model.
//
// A Backend turns a device-independent resnet.Model into an Engine for one device
// kind. An Engine owns one Worker per compute lane. The server drives every batch
// through a Worker in four steps, each of which may be called from a different
// goroutine (the Overlap pipeline runs copy-in, compute and copy-out on three):
//
//  1. CopyIn(slot, parts): the request data lands in the slot's device buffer
//     (on a GPU: an asynchronous host-to-device copy on a copy stream);
//  2. Compute(slot, n): the forward pass for n images, ordered after step 1;
//  3. CopyOut(slot, n): logits to the slot's host buffer, ordered after step 2;
//  4. Wait(slot): blocks until Output(slot) holds the logits, and returns the
//     device-side stage times when the device measures them.
//
// A slot is one batch in flight: a worker has Slots() of them, and the server
// never hands a slot to step 1 again before step 4 of its previous batch returned.
// A goroutine calls Bind once before it drives a worker and calls the returned
// function when it is done (GPU back-ends lock the OS thread and make their
// context current there); a worker that cannot be bound is out of service.
//
// Back-end packages register themselves by name (Register, called from their
// init without touching any device), as database/sql drivers do; a program
// selects one by importing its package and naming it (Lookup).
//
// Warm-up has one vocabulary from the back-ends to the benchmark suite. A
// server's warm-up is three phases, reported as load-ns, setup-ns and first-ns:
//
//   - load: building the model or reading its checkpoint (the server's);
//   - setup: Backend.Open, which Info.Setup splits into the back-end's own
//     named Parts (for example "plan" or "capture"), its steps, one after
//     another; a step may be followed by Parts for its sub-steps, named
//     "step.sub" (for example "init.context"), which are part of their step's
//     time or overlap it, and are not added again;
//   - first: the device's first inferences. A back-end that runs them inside
//     Open (the cuda back-end primes every prepared batch size before it
//     captures and calibrates) reports them as the Part named PartFirst; the
//     server counts that part in first, not in setup, and adds its own first
//     inference through every worker after Open.
//
// A Part's name is a step of setup (or PartFirst), never "load" or "setup".
package backend

import (
	"errors"
	"fmt"
	"time"

	"github.com/inferbench/inferbench/inference/resnet"
)

// Pipeline is how the copy and compute stages of a worker are arranged.
type Pipeline int

const (
	// Serial runs copy-in, compute and copy-out one after another on the worker's
	// own stream, one batch at a time.
	Serial Pipeline = iota
	// Overlap runs the copies on dedicated copy streams synchronised with events,
	// so the copies of one batch overlap the compute of another.
	Overlap
)

// String returns "serial" or "overlap".
func (p Pipeline) String() string {
	switch p {
	case Serial:
		return "serial"
	case Overlap:
		return "overlap"
	}
	return fmt.Sprintf("Pipeline(%d)", int(p))
}

// ParsePipeline is the inverse of Pipeline.String.
func ParsePipeline(s string) (Pipeline, error) {
	switch s {
	case "serial":
		return Serial, nil
	case "overlap":
		return Overlap, nil
	}
	return 0, fmt.Errorf("backend: unknown pipeline %q (want serial or overlap)", s)
}

// Precision is the arithmetic a back-end computes in.
type Precision int

const (
	// FP32 is IEEE single precision throughout.
	FP32 Precision = iota
	// TF32 keeps fp32 data but lets tensor cores round the inputs of products to
	// TF32 (10-bit mantissa).
	TF32
	// FP16 stores activations and weights in half precision and accumulates in fp32.
	FP16
)

// String returns "fp32", "tf32" or "fp16".
func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case TF32:
		return "tf32"
	case FP16:
		return "fp16"
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// ParsePrecision is the inverse of Precision.String.
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "fp32":
		return FP32, nil
	case "tf32":
		return TF32, nil
	case "fp16":
		return FP16, nil
	}
	return 0, fmt.Errorf("backend: unknown precision %q (want fp32, tf32 or fp16)", s)
}

// Convs is how a GPU back-end runs its convolutions.
type Convs int

// Convolution paths.
const (
	// ConvsLegacy runs every convolution with cuDNN's legacy fused call
	// (cudnnConvolutionBiasActivationForward). It is the default: the graph
	// path's engine search makes a start without an algorithm cache several
	// times longer, and its captured CUDA graphs have not yet been checked
	// against the reference on a GPU.
	ConvsLegacy Convs = iota
	// ConvsGraph runs each convolution with its bias, residual add and ReLU
	// as one operation graph of cuDNN's backend API, with the engine chosen by
	// heuristics and measurement, where that beats ConvsLegacy's call for the
	// layer (which it keeps otherwise).
	ConvsGraph
)

// String returns "graph" or "legacy".
func (c Convs) String() string {
	switch c {
	case ConvsGraph:
		return "graph"
	case ConvsLegacy:
		return "legacy"
	}
	return fmt.Sprintf("Convs(%d)", int(c))
}

// ParseConvs is the inverse of Convs.String.
func ParseConvs(s string) (Convs, error) {
	switch s {
	case "graph":
		return ConvsGraph, nil
	case "legacy":
		return ConvsLegacy, nil
	}
	return 0, fmt.Errorf("backend: unknown convolution path %q (want graph or legacy)", s)
}

// Options says what an Engine must be able to run. The server fills every field.
type Options struct {
	// Height and Width are the input size in pixels; in inference.Config 0
	// means 250 (the seed's). At most 8192.
	Height, Width int
	// MaxBatch is the largest batch a request (or a merged batch) may have,
	// and so the largest one slot holds; in inference.Config 0 means
	// inference.DefaultMaxBatch. At most 4096, and MaxBatch images may hold
	// at most 2^31 values.
	MaxBatch int
	// Batches lists the batch sizes to prepare at start-up (plans, graphs);
	// other sizes up to MaxBatch must still work, possibly slower on first
	// use. If empty, {1}.
	Batches []int
	// Workers is the number of compute workers; in inference.Config 0 means
	// 1. At most 256.
	Workers int
	// Pipeline arranges the stages of every worker; the zero value is Serial.
	Pipeline Pipeline
	// Slots is the number of batches in flight per worker; in
	// inference.Config 0 means 1 for Serial and 3 for Overlap (one copying
	// in, one computing, one copying out). At most 16.
	Slots int
	// Precision is the arithmetic (zero: fp32), Graphs captures the forward
	// pass in a graph per batch size (GPU), Convs says how convolutions run
	// (GPU; zero: ConvsLegacy), and Devices lists the device ordinals the
	// workers are spread over (empty: device 0).
	Precision Precision
	Graphs    bool
	Convs     Convs
	Devices   []int
	// PinnedInput promises input from Allocator.AllocHost (inference's
	// AllocInput): the CUDA back-end then makes no pinned staging buffer per
	// slot for pageable input (MaxBatch images each, page-locked during
	// warm-up) and copies any pageable input through the driver, which is
	// slower. Leave it false unless callers use AllocInput.
	PinnedInput bool
	// AlgoCache is where a GPU back-end keeps the algorithms it chose by
	// measuring, so that a later start can skip the search: "" is the
	// back-end's default location, "off" keeps no cache (every start
	// searches), anything else is a file path. A fresh path forces a cold
	// start.
	AlgoCache string
	// Normalization maps uint8 inputs to the model's float input, per
	// channel; zero means ImageNet. A back-end whose workers are Uint8Workers
	// (cuda) normalises on the device; others get the input normalised on
	// the host at Submit.
	Normalization Normalization
}

// A Backend makes Engines for one kind of device.
type Backend interface {
	// Name is the name the back-end registers under and the value of the
	// benchmark parameter backend=NAME ("cpu", "cuda", "nop").
	Name() string
	// Open prepares m to run with opts. The model is read, not kept or changed.
	Open(m *resnet.Model, opts Options) (Engine, error)
}

// A Starter is a Backend that can begin, before Open, the part of its set-up
// that needs no model (a GPU back-end's driver, libraries and device
// contexts), so that it overlaps the caller's loading of the model. Start
// returns at once and never fails (Open reports any error); the Open that
// follows, with the same Options, takes over what it made. stop waits for
// Start's work and releases whatever no Open took over: call it once, after
// Open or instead of it.
type Starter interface {
	Start(opts Options) (stop func())
}

// An Engine is a model ready to run on one device kind.
type Engine interface {
	// Info describes the device for config lines and the warm-up breakdown.
	Info() Info
	// Workers returns the compute lanes, len(Workers()) == Options.Workers.
	Workers() []Worker
	// Sampler returns a utilisation sampler, or nil when the device has none.
	Sampler() Sampler
	// Close releases every resource; it is idempotent.
	Close() error
}

// Allocator is implemented by Engines that can hand out host memory which the
// device copies from without a staging copy (pinned memory on CUDA).
type Allocator interface {
	// AllocHost returns n float32 values of such memory.
	AllocHost(n int) ([]float32, error)
	// FreeHost releases memory from AllocHost.
	FreeHost(p []float32) error
}

// Info describes an Engine's device.
type Info struct {
	// Config holds "key: value" config lines for benchmark output, in order
	// (for example {"gpu", "NVIDIA H200"}, {"driver", "580.159.04"}).
	Config []KV
	// Setup splits the setup phase of warm-up (Open) into the back-end's own
	// steps (for example "plan", "capture"), each followed by its sub-steps
	// ("plan.search"), measured during Open; see the package comment for the
	// vocabulary.
	Setup []Part
	// GPU says the workers run on GPUs: Worker.Device is then a GPU ordinal
	// (timelines get one process per device). False for host back-ends.
	GPU bool
}

// KV is one config line.
type KV struct{ Key, Value string }

// PartFirst names the Part in which a back-end runs its first inferences
// during Open; the server reports it as first, not setup (see the package
// comment).
const PartFirst = "prime"

// Part is one named step of the setup phase of warm-up.
type Part struct {
	Name string
	Time time.Duration
}

// A Worker is one compute lane. Its methods are safe to call from the stage
// goroutines the package comment describes, never for one slot at once.
type Worker interface {
	// Bind prepares the calling goroutine to drive this worker and returns the
	// function that undoes it. If it fails, it has undone what it did (release
	// is nil) and the worker is out of service for the caller.
	Bind() (release func(), err error)
	// Slots is the number of batches this worker can hold in flight.
	Slots() int
	// CopyIn starts moving the request data into slot. Each part holds whole
	// images (a multiple of 3*Height*Width values); the batch is their
	// concatenation. The parts must stay unchanged until Wait(slot) returns.
	CopyIn(slot int, parts [][]float32) error
	// Compute starts the forward pass for the first n images in slot.
	Compute(slot, n int) error
	// CopyOut starts moving the logits of n images to Output(slot).
	CopyOut(slot, n int) error
	// Wait blocks until Output(slot) holds the logits.
	Wait(slot int) (Times, error)
	// Output is the host buffer of slot: MaxBatch*Classes values, row-major
	// [image][class]. It is valid from Wait's return until the next CopyIn(slot).
	Output(slot int) []float32
	// Device is the ordinal of the device this worker runs on.
	Device() int
}

// A Uint8Worker also takes uint8 images ([n, 3, H, W] bytes, NCHW) and
// normalises them on the device with Options.Normalization, so that a copy-in
// moves a quarter of the bytes of float32 input. The cuda back-end's workers
// are Uint8Workers; others get float input, normalised on the host (Widen).
type Uint8Worker interface {
	Worker
	// CopyInUint8 is CopyIn for uint8 parts (each a multiple of 3*Height*Width
	// bytes). Compute then runs the batch from its normalised bytes.
	CopyInUint8(slot int, parts [][]uint8) error
}

// Times are device-measured stage durations of one batch, on the device's
// clock (on a GPU, from events recorded on its streams).
type Times struct {
	// H2D is the copy-in: from the device reaching the first copy of the batch
	// to its last copy's end.
	H2D time.Duration
	// Compute is the device's execution of the forward pass: the compute
	// stream's span from the event before the forward pass to the event after
	// it, less LaunchGap when HasLaunchGap (the whole span otherwise). Time the
	// device spent on other batches that shared it (other workers' kernels
	// running at the same time) is included.
	Compute time.Duration
	// LaunchGap is the part of that span in which the device waited for the
	// host to enqueue the next part of the forward pass, so that
	// Compute+LaunchGap is the span. How the back-end measures it is its own
	// (see package cuda); HasLaunchGap is false where it did not.
	LaunchGap time.Duration
	// D2H is the copy-out of the logits, as H2D.
	D2H time.Duration
	// Valid is false when the device does not time stages (then every field is
	// zero and none was measured).
	Valid bool
	// HasLaunchGap says that LaunchGap was measured and Compute excludes it.
	HasLaunchGap bool
}

// A Sampler measures device utilisation over an interval. Start and Stop are
// called from one goroutine, in turn.
type Sampler interface {
	// Start begins an interval.
	Start() error
	// Stop ends it and returns what was measured.
	Stop() (Utilization, error)
}

// UtilizationKind says what a Utilization's Percent measures.
type UtilizationKind int

const (
	// NoUtilization means Percent was not measured.
	NoUtilization UtilizationKind = iota
	// ProcessCPU is the process's CPU time (user and system) over wall time
	// times the number of CPUs: 100 means every core busy all interval.
	ProcessCPU
	// GPUUtilization is NVML's utilization.gpu (the share of time a kernel ran
	// on the GPU), averaged over the samples and devices.
	GPUUtilization
)

// String returns "none", "process-cpu" or "gpu".
func (k UtilizationKind) String() string {
	switch k {
	case NoUtilization:
		return "none"
	case ProcessCPU:
		return "process-cpu"
	case GPUUtilization:
		return "gpu"
	}
	return fmt.Sprintf("UtilizationKind(%d)", int(k))
}

// Utilization is what a Sampler measured over one interval.
type Utilization struct {
	// Kind says what Percent measures; Percent is meaningful only when Kind
	// is not NoUtilization.
	Kind    UtilizationKind
	Percent float64
	// PercentErr says why Percent was not measured, when a sampler of some
	// kind could not measure it and Kind is therefore NoUtilization (for
	// NVML: the library could not be opened, or the interval was shorter
	// than the sampling period, so no sample fell inside it). It is nil when
	// Percent was measured.
	PercentErr error
	// Busy is the percentage of the interval during which the device executed
	// this engine's forward passes (Times.Compute: kernels, not the gaps in
	// which the device waited for the host), measured from device events (GPU
	// back-ends); HasBusy says whether it was measured.
	Busy    float64
	HasBusy bool
	// Samples is how many samples Percent averages: for NVML, one per device
	// per sampling period of the interval; 0 for a sampler that measures the
	// whole interval at once.
	Samples int
}

// ErrDeviceLost marks a worker error after which the worker cannot run again
// (wrap it with %w); the server takes that worker out of service.
var ErrDeviceLost = errors.New("backend: device lost")

// ErrNoGPU is returned by GPU back-ends built without GPU support or run where
// there is no usable GPU.
var ErrNoGPU = errors.New("backend: no usable GPU (build with -tags cuda and run on a machine with an NVIDIA driver)")

// Package cuda is the GPU back-end: it runs a resnet.Model on NVIDIA GPUs with
// cuDNN and kernels of its own (the input conversion and the classifier head,
// kernels/).
//
// Nothing GPU-related is linked or touched before it is needed: the CUDA
// driver (libcuda.so.1) and cuDNN are loaded with dlopen, and the
// driver is initialised, by the first Open or Describe. A program built with
// -tags cuda therefore starts on a machine without a GPU or driver, and Open
// and Describe tell it why there is no GPU (an error wrapping backend.ErrNoGPU).
// The driver is called through package internal/gpu/cudadrv rather than
// gorgonia.org/cu, whose package init calls cuInit and exits the process when
// that fails, and which links libcuda; gorgonia.org/cu remains only in a
// test that cross-checks cudadrv's answers against it on a GPU machine
// (internal/gpu/cudadrv/crosscheck, built with -tags 'cuda gorgonia').
//
// Open prepares a backend.Engine in steps, each timed as a part of Info().Setup
// under the name given here (the setup phase of warm-up, in package backend's
// vocabulary: none of them is the server's load or first phase), and each
// followed by parts for its sub-steps ("init.context"), whose times are the
// wall time during which the sub-step was under way (several runs of it at
// once count once; sub-steps of one step may overlap):
//
//  1. init: initialise the driver and retain each device's primary context
//     (init.driver, init.context) while, at the same time, cuDNN loads, with the parts of cuDNN it would load on its first convolution
//     (init.libraries), and the model is folded (batch-norm into convolution
//     weight and bias, init.fold) and packed (init.network); then, all at
//     once, upload the weights (init.weights) and load the input conversion
//     and classifier head kernels (init.kernels) on every device, make every
//     Worker's streams and cuDNN handle (init.cudnn-handles), activation
//     buffers, per-slot device buffers and events (init.buffers) and
//     page-locked staging and output buffers (init.pin), and open NVML
//     (init.nvml). A backend.Starter's Start (the server calls it before it
//     loads the model) does the driver, the contexts and the libraries ahead,
//     so that init.driver and init.context are then only what Open still
//     waited for;
//  2. plan: make tensor descriptors for every batch size of Options.Batches and
//     MaxBatch and, once per distinct convolution problem, choose an algorithm
//     by measuring (plan.search; switches.CUDNNSearch says how: by default the
//     heuristics' first few, each timed as the forward pass calls it), or take
//     it from the algorithm cache file (Options.AlgoCache, switches.CUDNNCache) after
//     checking it (plan.cache), so that a later start skips the search; with
//     backend.ConvsGraph, also time the same convolution with its bias,
//     residual add and ReLU as one operation graph of cuDNN's backend API, for
//     the heuristics' first engine configurations, and keep the fastest plan
//     where it beats the legacy call (convgraph.go; cached too); then every
//     worker, all at once, finalizes its own plans and sizes its workspace
//     (plan.workers; other batch sizes are planned on first use with cuDNN's
//     heuristics, untimed);
//  3. capture (Options.Graphs): record the forward pass of every planned batch
//     size for every slot into a CUDA graph (capture.record), to be replayed
//     with one launch, instantiate it (capture.instantiate) and upload it to
//     the device (capture.upload; nothing runs), every worker on its own
//     thread at once;
//  4. prime: run each worker's first forward pass of every planned batch size,
//     as Compute would (one graph launch, with graphs), the workers at once.
//     This is the engine's first inference, where the device first executes
//     the model and pays what a first run costs (loading kernels, the
//     libraries' lazy set-up), so that calibrate times warm passes and no
//     prepared size pays it while serving; the server's first inference
//     (first-ns) comes after Open and is warm;
//  5. calibrate (without Options.Graphs): on the first worker of every device,
//     time each planned batch size's forward pass as the device runs it with
//     nothing waiting for the host: the compute stream is held back by a gate
//     (cudadrv.Gate) until the whole pass is enqueued, and events after the
//     gate and after the pass give its own time (median of 5 runs). If the gate
//     fails, Open goes on without it and says so in the config line
//     cuda-calibration.
//
// Info().Config holds the device's config lines (see Describe), cuda-devices,
// cuda-convs (the convolution path and, for graph, how many prepared
// convolutions run as backend-API plans), cuda-stem (the stem convolution's
// form, plain or s2d, and its shape), and the algorithm cache's use,
// which tells a cold start from a warm one:
// cudnn-algo-cache (off, cold, warm or partial, with hits and misses),
// cudnn-algo-cache-file and, if the file could not be read or written,
// cudnn-algo-cache-error; and cudnn-search, how a cold start searches.
//
// Precision picks the arithmetic and layout: FP32 is NCHW float without tensor
// cores; TF32 is NHWC float with tensor cores allowed; FP16 is NHWC half with
// float accumulation. The float NCHW input is converted on the GPU (our kernel,
// kernels/normalize.cu) when the layout or type differs; the classifier head
// (average pool, then the fully connected layer with its bias) is float32
// whatever the precision, in two kernels of ours (head.go).
//
// A batch flows through a Worker: CopyIn (parts in memory from AllocHost are
// copied directly; other parts are first copied into the slot's pinned staging
// buffer by several goroutines), Compute (per layer one fused convolution + bias
// + ReLU (+ residual) call, max-pool, average pool, classifier, or
// one graph launch), CopyOut and Wait. In the Serial pipeline all steps share
// the worker's stream; in Overlap, copy-in, compute and copy-out have their own
// streams, ordered by events.
//
// Each step is bracketed by CUDA events, which give the stage times of
// backend.Times. The compute span (from the event before the forward pass to
// the one after) includes the time the device waited for the host to enqueue
// the next call, which without graphs can be most of it at small batches. Wait
// splits it (splitSpan) into Compute, the device's execution, and LaunchGap,
// using one more event, which the host records on an idle stream of the device
// right after enqueueing the pass (the device can wait for the host only until
// then), and the pass's own time from calibrate. A graph is one launch: its gap
// is the wait for that launch. A batch that runs as library calls at a size
// calibrate did not time (a size planned after Open; with graphs, the only
// batches that run as calls) has no split: its Compute is the whole span and
// HasLaunchGap is false. The Sampler's busy fraction is built from Compute, so
// it counts execution, not launch gaps.
//
// Without the cuda build tag, Open and Describe return errors wrapping
// backend.ErrNoGPU.
//
// Importing the package registers the back-end as "cuda" (backend.Register);
// registering touches no driver.
package cuda

import "github.com/inferbench/inferbench/inference/backend"

func init() { backend.Register(New()) }

// cudaBackend makes CUDA engines.
type cudaBackend struct{}

// New returns the CUDA back-end.
func New() backend.Backend { return cudaBackend{} }

// Name returns "cuda".
func (cudaBackend) Name() string { return "cuda" }

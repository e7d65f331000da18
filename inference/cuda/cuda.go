// Package cuda is the GPU back-end: it runs a resnet.Model on NVIDIA GPUs with
// cuDNN and cuBLAS (loaded at run time) through gorgonia.org/cu.
//
// Open prepares an Engine in steps:
//
//  1. load cuDNN and cuBLAS, retain each device's primary context and upload
//     the folded model (batch-norm folded into convolution weight and bias);
//  2. make every Worker's streams, cuDNN/cuBLAS handles, activation buffers,
//     per-slot device buffers, pinned staging and output buffers, and events;
//  3. plan every batch size of Options.Batches and MaxBatch: tensor descriptors
//     and, per convolution shape, the fastest algorithm measured with
//     cudnnFindConvolutionForwardAlgorithmEx (other batch sizes are planned on
//     first use with cuDNN's heuristics); size one workspace per worker;
//  4. run one forward pass per planned batch size on every worker.
//
// A batch then flows through a Worker: CopyIn (pinned staging or caller's pinned
// memory, then an asynchronous host-to-device copy), Compute (convolution +
// bias + ReLU + residual fused per layer, max-pool, average pool, classifier
// GEMM + bias), CopyOut and Wait, each step bracketed by CUDA events that give
// the stage times. In the Serial pipeline all steps share the worker's stream;
// in Overlap, copy-in, compute and copy-out have their own streams, ordered by
// events.
//
// Without the cuda build tag, Open returns an error wrapping backend.ErrNoGPU.
package cuda

import "github.com/inferbench/inferbench/inference/backend"

// Backend makes CUDA Engines.
type Backend struct{}

// New returns the CUDA back-end.
func New() backend.Backend { return Backend{} }

// Name returns "cuda".
func (Backend) Name() string { return "cuda" }

// Package inference is an inference server for ResNet models that you measure
// with go test -bench: requests go in, logits come out, and every step on the
// way is timed.
//
// The request path:
//
//  1. A client calls Submit (asynchronous, returns a *Call) or Infer
//     (synchronous) with a batch [n, 3, H, W] float32 and a context. The request
//     is stamped with its intended send time (Request.Sent; under open-loop load
//     the scheduled time), from which latency is measured.
//  2. Admission: shape, size and (optionally) finiteness are checked, and a bad
//     request gets an *InputError naming what was expected and what came. The
//     request then joins a bounded queue (Config.MaxQueue); when it is full,
//     Submit blocks or fails with ErrQueueFull (Config.QueuePolicy). Requests
//     whose context ended while queued are dropped before any work is done.
//  3. Optional dynamic batching (Config.MaxQueueDelay > 0): queued requests are
//     merged, never split, into batches of at most MaxBatch images.
//  4. Copy-in: a worker hands the batch to its back-end (backend.Worker.CopyIn):
//     on a GPU, an asynchronous copy from pinned memory on a copy stream.
//  5. Compute: the forward pass on the worker's own stream (CUDA) or cores (CPU).
//  6. Copy-out: the logits return to host memory and are scattered to the
//     callers; each Call is answered exactly once, with the logits and a Timing
//     that splits its latency into queue, copy-in, compute and copy-out.
//  7. Measurement: every answer feeds a latency histogram and stage means
//     (Stats), and a back-end sampler measures device utilisation.
//
// Config.Pipeline chooses how steps 4-6 overlap: Serial runs them one after
// another per worker; Overlap runs them on three goroutines (and, on a GPU, three
// streams) so consecutive batches overlap. Config.Workers sets the number of
// compute lanes. The back-ends live in sub-packages (cpu, cuda, nop) behind the
// backend.Backend seam; the server never imports cgo.
package inference

// Package inference is an inference server for ResNet models that you measure
// with go test -bench: requests go in, logits come out, and every step on the
// way is timed.
//
// The request path:
//
//  1. A client calls Submit (asynchronous, returns a *Call) or Infer
//     (synchronous) with a batch [n, 3, H, W] (float32, or uint8 image bytes
//     normalised with Config.Normalization: on the device by back-ends whose
//     workers are backend.Uint8Workers, on the host at Submit otherwise) and a
//     context. The request is stamped with its intended send time
//     (Request.Sent; under open-loop load the scheduled time), from which
//     latency is measured.
//  2. Admission: shape, size and (optionally) finiteness are checked, and a bad
//     request gets an *InputError naming what was expected and what came. A
//     request whose deadline has already passed is refused. The request then
//     joins a bounded queue (Config.MaxQueue); when it is full, Submit blocks
//     or fails with ErrQueueFull (Config.QueuePolicy). A request whose context
//     ends while it is queued leaves the queue at once and is answered with
//     the context's error.
//  3. Optional dynamic batching (Config.MaxQueueDelay > 0): queued requests are
//     merged, never split, into batches of at most MaxBatch images.
//  4. Copy-in: a worker hands the batch to its back-end (backend.Worker.CopyIn):
//     on a GPU, an asynchronous copy from pinned memory on a copy stream. An
//     input already in GPU memory (Tensor.Device: another process's memory
//     mapped with Server.OpenIPC, on back-ends where Server.DeviceIO) is
//     copied device to device instead (backend.DeviceWorker).
//  5. Compute: the forward pass on the worker's own stream (CUDA) or cores (CPU).
//  6. Copy-out: the logits return to host memory and are scattered to the
//     callers (or, for Request.DeviceLogits, are copied device to device);
//     each Call is answered exactly once, with the logits and a Timing
//     that splits its latency into queue, copy-in, compute and copy-out.
//  7. Measurement: every answer feeds a latency histogram and per-stage sums
//     in the worker's own shard, read together as cumulative Stats (difference
//     two with Stats.Sub for an interval), and a back-end sampler measures
//     device utilisation.
//
// The server reads a request's input until its call is answered; Infer returns
// only once the server no longer reads it.
//
// Config.Pipeline chooses how steps 4-6 overlap: Serial runs them one after
// another per worker; Overlap runs them on three goroutines (and, on a GPU, three
// streams) so consecutive batches overlap. Config.Workers sets the number of
// compute lanes. A worker whose device is lost, or that cannot be bound to its
// goroutine, leaves service; when none is left, every waiting request is
// answered with ErrNoWorker and admission stops.
//
// The back-ends live in sub-packages behind the backend.Backend seam and
// register themselves by name: the pure-Go cpu back-end is built in (the zero
// Config serves on it); programs that want another import its package, for
// example
//
//	import _ "github.com/inferbench/inferbench/inference/cuda"
//
// and name it in Config.BackendName, or pass an instance in Config.Backend.
// The server never imports cgo.
package inference

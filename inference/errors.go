package inference

import (
	"errors"
	"fmt"
)

var (
	// ErrServerClosed is returned for requests submitted after Shutdown or
	// Close began, and for queued requests that Close failed.
	ErrServerClosed = errors.New("inference: server closed")
	// ErrQueueFull is returned by Submit under the Reject policy when the queue is full.
	ErrQueueFull = errors.New("inference: request queue full")
	// ErrBadInput is matched (errors.Is) by every *InputError.
	ErrBadInput = errors.New("inference: bad input")
	// ErrNoWorker is returned when every worker is out of service; the error
	// also wraps the last worker's cause (a *WorkerError).
	ErrNoWorker = errors.New("inference: no worker in service")
)

// errNilContext is returned by Submit, Infer and Shutdown for a nil context, as
// net/http does for its own nil-context misuse.
var errNilContext = errors.New("inference: nil Context")

// InputError describes a malformed request: which property was wrong, what the
// server expected and what it got.
type InputError struct {
	// Field names the property, checked in this order:
	//
	//   - "input": the tensor is empty (nil Shape and Data);
	//   - "rank": Shape does not have 4 dimensions;
	//   - "channels": Shape[1] is not the model's input channels;
	//   - "height x width": the image is smaller than 32x32, which no ResNet takes;
	//   - "height", "width": Shape[2] or Shape[3] is not the server's;
	//   - "batch": Shape[0] is outside 1..MaxBatch;
	//   - "data": len(Data) is not the product of Shape (for Device: its bytes
	//     are not those of the shape), or Device is set beside Data or Bytes;
	//   - "value": a NaN or ±Inf value (only with Config.RejectNonFinite,
	//     which refuses every input in device memory: it cannot be checked);
	//   - "logits buffer": Request.Logits is set but does not hold n x classes
	//     values, Request.DeviceLogits does not hold 4 x n x classes bytes, or
	//     both are set;
	//   - "device memory": an input or logits in device memory on a server
	//     whose back-end cannot take them (Server.DeviceIO is false), or a
	//     uint8 input in device memory that the back-end would have to
	//     normalise on the host.
	Field string
	Want  string
	Got   string
}

// Error reads "inference: bad input: <field>: want <want>, got <got>".
func (e *InputError) Error() string {
	return fmt.Sprintf("inference: bad input: %s: want %s, got %s", e.Field, e.Want, e.Got)
}

// Is makes errors.Is(err, ErrBadInput) true.
func (e *InputError) Is(target error) bool { return target == ErrBadInput }

// WorkerError is the error of a batch whose worker failed (a back-end error or a
// recovered panic), and the cause of a worker's leaving service.
type WorkerError struct {
	Worker int
	Err    error
}

// Error names the worker and the cause.
func (e *WorkerError) Error() string { return fmt.Sprintf("inference: worker %d: %v", e.Worker, e.Err) }

// Unwrap returns the cause.
func (e *WorkerError) Unwrap() error { return e.Err }

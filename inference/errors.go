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
	// ErrNoWorker is returned when every worker is out of service.
	ErrNoWorker = errors.New("inference: no worker in service")
)

// InputError describes a malformed request: which property was wrong, what the
// server expected and what it got.
type InputError struct {
	Field string // "input", "rank", "channels", "height", "width", "batch", "data", "value"
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
// recovered panic).
type WorkerError struct {
	Worker int
	Err    error
}

// Error names the worker and the cause.
func (e *WorkerError) Error() string { return fmt.Sprintf("inference: worker %d: %v", e.Worker, e.Err) }

// Unwrap returns the cause.
func (e *WorkerError) Unwrap() error { return e.Err }

package protocol

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/inferbench/inferbench/inference"
)

// Error is a request's failure as both transports report it: an HTTP status
// with the body {"error": Msg}, and a gRPC status code with Msg.
type Error struct {
	Status int        // HTTP status
	Code   codes.Code // gRPC code
	Msg    string
	// RetryAfter, if positive, is sent as the HTTP Retry-After header (seconds):
	// the server is overloaded or not ready, and the request may succeed later.
	RetryAfter int
}

func (e *Error) Error() string { return e.Msg }

// badRequest is a malformed request: 400, InvalidArgument.
func badRequest(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: codes.InvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

// notFound is an unknown model or version: 404, NotFound.
func notFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Code: codes.NotFound, Msg: fmt.Sprintf(format, args...)}
}

// tooLarge is a body or message above the configured limit: 413, ResourceExhausted.
func tooLarge(format string, args ...any) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: codes.ResourceExhausted, Msg: fmt.Sprintf(format, args...)}
}

// unavailable is a server that cannot take the request now: 503 with
// Retry-After, Unavailable.
func unavailable(format string, args ...any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: codes.Unavailable, Msg: fmt.Sprintf(format, args...), RetryAfter: 1}
}

// overloaded is a full queue or memory budget: 503 with Retry-After,
// ResourceExhausted.
func overloaded(format string, args ...any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: codes.ResourceExhausted, Msg: fmt.Sprintf(format, args...), RetryAfter: 1}
}

// StatusClientClosed is the HTTP status logged for a request whose client
// went away before it was answered (nginx's convention; the client never
// sees it).
const StatusClientClosed = 499

// asError maps an error of the inference server (or of a request's context)
// to the protocol's statuses.
func asError(err error) *Error {
	var pe *Error
	switch {
	case errors.As(err, &pe):
		return pe
	case errors.Is(err, inference.ErrBadInput):
		return badRequest("%v", err)
	case errors.Is(err, inference.ErrQueueFull):
		return overloaded("%v", err)
	case errors.Is(err, inference.ErrServerClosed), errors.Is(err, inference.ErrNoWorker):
		return unavailable("%v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusGatewayTimeout, Code: codes.DeadlineExceeded, Msg: "inference: request deadline exceeded"}
	case errors.Is(err, context.Canceled):
		return &Error{Status: StatusClientClosed, Code: codes.Canceled, Msg: "inference: request cancelled"}
	}
	return &Error{Status: http.StatusInternalServerError, Code: codes.Internal, Msg: err.Error()}
}

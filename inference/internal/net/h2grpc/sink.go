package h2grpc

import (
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A Sink receives one request message's bytes as they arrive: the
// connection's reader reads them from the socket straight into the memory
// Buffer returns, so a sink that knows where a message's payload belongs
// (an input tensor's buffer) costs no copy. A sink is used by one goroutine
// at a time: the connection's reader, then the handler that decodes it.
type Sink interface {
	// Buffer returns where the message's next bytes go: between 1 and n
	// bytes of memory the sink owns.
	Buffer(n int) []byte
	// Filled says that the first k bytes of the last Buffer now hold the
	// message's next bytes. An error fails the message: its other bytes
	// are dropped and Decode returns the error.
	Filled(k int) error
	// Decode fills m, the handler's message, once every byte is Filled.
	// An error that is not a gRPC status is answered as grpc-go answers a
	// codec's: Internal, "grpc: error unmarshalling request: ...".
	Decode(m any) error
	// Release frees what the sink holds; it is called instead of Decode for
	// a message no handler takes.
	Release()
}

// SinkFunc returns the sink for a message of size bytes sent to method
// ("/package.Service/Method"), or nil for the default: the bytes gathered in
// memory and decoded as protobuf.
type SinkFunc func(method string, size int) Sink

// bytesSink gathers a message in memory and unmarshals it as protobuf.
type bytesSink struct {
	size int
	buf  []byte
}

func (s *bytesSink) Buffer(n int) []byte {
	// Grow as bytes arrive, not by the size the prefix claims: a peer
	// that announces a large message and sends little of it costs little.
	s.buf = slices.Grow(s.buf, min(n, s.size-len(s.buf)))
	return s.buf[len(s.buf) : len(s.buf)+min(n, cap(s.buf)-len(s.buf))]
}

func (s *bytesSink) Filled(k int) error { s.buf = s.buf[:len(s.buf)+k]; return nil }

func (s *bytesSink) Decode(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "h2grpc: %T is not a protobuf message", m)
	}
	return proto.Unmarshal(s.buf, pm)
}

func (s *bytesSink) Release() { s.buf = nil }

// failedSink stands for a message that could not be received; its Decode
// returns the error.
type failedSink struct{ err error }

func (s failedSink) Buffer(int) []byte { return nil }
func (s failedSink) Filled(int) error  { return s.err }
func (s failedSink) Decode(any) error  { return s.err }
func (s failedSink) Release()          {}

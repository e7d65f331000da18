package client

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/inferbench/inferbench/inference/internal/net/writev"
	"github.com/inferbench/inferbench/internal/busyread"
)

// An inference request's HTTP body is the JSON header followed by the
// tensors' bytes. net/http copies a body of known length into the
// connection through io.LimitReader, which hides any WriterTo of the body,
// so a 192 MB batch went through a 32 KiB buffer: a copy of every byte and
// 6,000 write calls. tensorBody and directConn let it go out as it is: after
// the first buffer's worth, the transport hands the rest to the connection's
// ReadFrom, which recognises the body and writes its slices with writev.

// tensorBody reads a list of byte slices in order, without copying them
// until Read is asked to.
type tensorBody struct {
	bufs net.Buffers
}

func newTensorBody(parts ...[]byte) *tensorBody {
	b := &tensorBody{}
	for _, p := range parts {
		if len(p) > 0 {
			b.bufs = append(b.bufs, p)
		}
	}
	return b
}

// Close makes tensorBody an io.ReadCloser, which net/http passes on as it
// is (a plain Reader would reach the connection inside a NopCloser, hidden
// from directConn).
func (b *tensorBody) Close() error { return nil }

func (b *tensorBody) Read(p []byte) (int, error) {
	if len(b.bufs) == 0 {
		return 0, io.EOF
	}
	return b.bufs.Read(p)
}

// writeTo writes at most n of the remaining bytes to w, straight from the
// slices (writev on a TCP connection) in chunks of at most writev.Chunk
// bytes, and consumes them.
func (b *tensorBody) writeTo(w io.Writer, n int64) (int64, error) {
	sent, rest, err := writev.To(w, b.bufs, n)
	b.bufs = rest
	return sent, err
}

// directConn is a connection whose ReadFrom writes a tensorBody directly
// (see above); any other source goes to the connection's own ReadFrom.
type directConn struct {
	net.Conn
}

func (c directConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if b, ok := lr.R.(*tensorBody); ok {
			n, err := b.writeTo(c.Conn, lr.N)
			lr.N -= n
			return n, err
		}
	}
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// directDialer wraps the connections dial makes in directConn, their reads
// looking for up to poll before they sleep (busyread).
func directDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), poll time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return directConn{busyread.Conn(c, poll)}, nil
	}
}

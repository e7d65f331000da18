// Package writev writes a list of byte slices to a connection without
// copying them: on a TCP connection, writev system calls, each handing the
// kernel at most Chunk bytes. The HTTP client's request bodies and h2grpc's
// frames go out through it.
package writev

import (
	"io"
	"net"
)

// Chunk is the most one call hands the writer: for a large body, chunks of
// 128 KiB beat both one writev of the whole body and net/http's copy loop.
var Chunk int64 = 128 << 10

// To writes the first n bytes of bufs (all of them if they hold fewer) to
// w, straight from the slices, Chunk bytes a call at most. It returns how
// many bytes it wrote and bufs without them: the slices left, the first
// trimmed in place. A w with a PlainConn method (a wrapper that passes
// bytes through unchanged, as connlimit.Conn) is written through it.
func To(w io.Writer, bufs [][]byte, n int64) (int64, [][]byte, error) {
	if p, ok := w.(interface{ PlainConn() net.Conn }); ok {
		w = p.PlainConn()
	}
	var total int64
	// One chunk's slices, in storage reused for every chunk (WriteTo
	// consumes out's header, not chunk's): no allocation per chunk.
	chunk := make(net.Buffers, 0, 4)
	var out net.Buffers
	for n > 0 && len(bufs) > 0 {
		out = chunk[:0]
		left := min(n, Chunk)
		for _, p := range bufs {
			if left <= 0 {
				break
			}
			p = p[:min(int64(len(p)), left)]
			out = append(out, p)
			left -= int64(len(p))
		}
		sent, err := out.WriteTo(w)
		bufs = consume(bufs, sent)
		total += sent
		n -= sent
		if err != nil {
			return total, bufs, err
		}
	}
	return total, bufs, nil
}

// consume drops the first n bytes of bufs.
func consume(bufs [][]byte, n int64) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if int64(len(bufs[0])) > n {
			bufs[0] = bufs[0][n:]
			return bufs
		}
		n -= int64(len(bufs[0]))
		bufs = bufs[1:]
	}
	return bufs
}

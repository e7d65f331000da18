package client

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/internal/net/writev"
)

// TestTensorBodyRead checks that Read gives the parts' bytes in order and
// then io.EOF, skipping empty parts.
func TestTensorBodyRead(t *testing.T) {
	b := newTensorBody([]byte("head"), nil, []byte("01234"), []byte("5678"))
	got, err := io.ReadAll(b)
	require.NoError(t, err)
	assert.Equal(t, "head012345678", string(got))
	n, err := b.Read(make([]byte, 4))
	assert.Equal(t, 0, n)
	assert.ErrorIs(t, err, io.EOF)
}

// TestDirectConnWritesTheRest plays the transport's part: part of the body
// is read through a buffer, the rest goes to the connection's ReadFrom under
// a LimitedReader; the peer must receive exactly the body, and the limit
// must be honoured (bytes past it stay unread).
func TestDirectConnWritesTheRest(t *testing.T) {
	for _, first := range []int{0, 3, 6, 12} {
		client, server := net.Pipe()
		got := make(chan []byte)
		go func() {
			b, _ := io.ReadAll(server)
			got <- b
		}()
		body := newTensorBody([]byte("head"), []byte("01234"), []byte("56789"), []byte("extra"))
		const length = 14 // "head" and the two tensors; "extra" lies beyond Content-Length
		buf := make([]byte, first)
		n, err := io.ReadFull(body, buf)
		require.NoError(t, err)
		_, err = client.Write(buf[:n])
		require.NoError(t, err)
		lr := &io.LimitedReader{R: body, N: int64(length - first)}
		sent, err := directConn{client}.ReadFrom(lr)
		require.NoError(t, err)
		assert.Equal(t, int64(length-first), sent)
		assert.Zero(t, lr.N)
		require.NoError(t, client.Close())
		assert.Equal(t, "head0123456789", string(<-got), "first %d bytes read through a buffer", first)
		rest, _ := io.ReadAll(body)
		assert.Equal(t, "extra", string(rest))
	}
}

// TestDirectConnOtherSources checks that a source other than a tensorBody
// is copied as it is.
func TestDirectConnOtherSources(t *testing.T) {
	client, server := net.Pipe()
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(server)
		got <- b
	}()
	n, err := directConn{client}.ReadFrom(io.LimitReader(strings.NewReader("abcdef"), 4))
	require.NoError(t, err)
	assert.Equal(t, int64(4), n)
	require.NoError(t, client.Close())
	assert.True(t, bytes.Equal([]byte("abcd"), <-got))
}

// TestDirectConnUnderNetHTTP sends a tensorBody through net/http's own
// transport to a loopback server: the body must arrive whole, and the
// transport must have handed the bulk of it to directConn's fast path.
func TestDirectConnUnderNetHTTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	got := make(chan []byte, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	var direct atomic.Int64
	// Reads that look before they sleep (busyread) under directConn change
	// nothing of the body's way out.
	dial := directDialer((&net.Dialer{}).DialContext, 200*time.Microsecond)
	tr := &http.Transport{WriteBufferSize: 4 << 10, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c.(directConn), &direct}, nil
	}}
	t.Cleanup(tr.CloseIdleConnections)
	tensor := bytes.Repeat([]byte("0123456789abcdef"), 1<<14) // 256 KiB
	head := []byte(`{"inputs":[]}`)
	req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/", newTensorBody(head, tensor))
	require.NoError(t, err)
	req.ContentLength = int64(len(head) + len(tensor))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, append(append([]byte{}, head...), tensor...), <-got)
	assert.Greater(t, direct.Load(), int64(len(tensor)/2), "bytes written by the fast path")
}

// countingConn counts what directConn's fast path writes.
type countingConn struct {
	directConn
	n *atomic.Int64
}

func (c countingConn) ReadFrom(r io.Reader) (int64, error) {
	lr, ok := r.(*io.LimitedReader)
	fast := ok && isTensorBody(lr.R)
	n, err := c.directConn.ReadFrom(r)
	if fast {
		c.n.Add(n)
	}
	return n, err
}

func isTensorBody(r io.Reader) bool {
	_, ok := r.(*tensorBody)
	return ok
}

// writeSizesTo records the size of every Write.
type writeSizesTo struct {
	bytes.Buffer
	sizes []int
}

func (w *writeSizesTo) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.Buffer.Write(p)
}

// TestTensorBodyWritesInChunks checks that writeTo hands the writer at most
// writev.Chunk bytes at a time, across slice boundaries, stops at n, and
// leaves the rest to Read.
func TestTensorBodyWritesInChunks(t *testing.T) {
	old := writev.Chunk
	writev.Chunk = 4
	defer func() { writev.Chunk = old }()
	body := newTensorBody([]byte("head"), []byte("0123456"), []byte("789"), []byte("extra"))
	var w writeSizesTo
	sent, err := body.writeTo(&w, 14)
	require.NoError(t, err)
	assert.Equal(t, int64(14), sent)
	assert.Equal(t, "head0123456789", w.String())
	for _, n := range w.sizes {
		assert.LessOrEqual(t, n, 4, "write sizes %v", w.sizes)
	}
	rest, _ := io.ReadAll(body)
	assert.Equal(t, "extra", string(rest))
}

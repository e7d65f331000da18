package busyread

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pair is a loopback TCP connection: the accepted end, wrapped by Listener
// with d, and the dialled end.
func pair(t *testing.T, d time.Duration) (net.Conn, net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := Listener(raw, d)
	defer ln.Close()
	dialled, err := net.Dial("tcp", raw.Addr().String())
	require.NoError(t, err)
	accepted, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() {
		accepted.Close()
		dialled.Close()
	})
	return accepted, dialled
}

func TestReadsWhatArrivesWhileLookingAndAfter(t *testing.T) {
	in, out := pair(t, 20*time.Millisecond)
	if runtime.GOOS == "linux" {
		_, wrapped := in.(*conn)
		assert.True(t, wrapped, "accepted connections look before they sleep")
	}
	buf := make([]byte, 64)
	for _, after := range []time.Duration{0, 5 * time.Millisecond, 60 * time.Millisecond} {
		go func() {
			time.Sleep(after)
			out.Write([]byte("answer"))
		}()
		n, err := in.Read(buf)
		require.NoError(t, err, "written after %v", after)
		assert.Equal(t, "answer", string(buf[:n]), "written after %v", after)
	}
	n, err := in.Read(nil)
	assert.Zero(t, n)
	assert.NoError(t, err)
}

func TestReadReportsTheEndAndDeadlinesAsTheConnectionDoes(t *testing.T) {
	in, out := pair(t, 10*time.Millisecond)
	require.NoError(t, in.SetReadDeadline(time.Now().Add(30*time.Millisecond)))
	_, err := in.Read(make([]byte, 8))
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
	require.NoError(t, in.SetReadDeadline(time.Time{}))

	// A message larger than one read arrives whole over several.
	msg := make([]byte, 1<<20)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	go func() {
		out.Write(msg)
		out.Close()
	}()
	got, err := io.ReadAll(in)
	require.NoError(t, err, "the peer's close is io.EOF, which ReadAll does not report")
	assert.Equal(t, msg, got)
	_, err = in.Read(make([]byte, 8))
	assert.Equal(t, io.EOF, err)
}

func TestZeroDurationWrapsNothing(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer raw.Close()
	assert.Equal(t, raw, Listener(raw, 0))
	c, err := net.Dial("tcp", raw.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, c, Conn(c, 0))
}

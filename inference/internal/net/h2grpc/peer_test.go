package h2grpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// rawPeer is a hand-driven HTTP/2 client: it sends frames of its choosing
// (x/net's Framer) and reads the server's.
type rawPeer struct {
	t   *testing.T
	nc  net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawPeer {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	p := newRawPeer(t, nc)
	_, err = io.WriteString(nc, preface)
	require.NoError(t, err)
	require.NoError(t, p.fr.WriteSettings(settings...))
	return p
}

// newRawPeer is a rawPeer over nc, which has sent nothing yet.
func newRawPeer(t *testing.T, nc net.Conn) *rawPeer {
	p := &rawPeer{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.buf)
	return p
}

// headers opens stream id as a gRPC call of method, plus extra fields.
func (p *rawPeer) headers(id uint32, method string, endStream bool, extra ...string) {
	p.buf.Reset()
	fields := append([]string{":method", "POST", ":scheme", "http", ":path", method, ":authority", "x",
		"content-type", "application/grpc", "te", "trailers"}, extra...)
	for i := 0; i < len(fields); i += 2 {
		p.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	require.NoError(p.t, p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.buf.Bytes(), EndHeaders: true, EndStream: endStream}))
}

// message sends msg as one gRPC message on stream id.
func (p *rawPeer) message(id uint32, msg []byte, endStream bool) {
	b := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	require.NoError(p.t, p.fr.WriteData(id, endStream, append(b, msg...)))
}

// until reads frames until keep returns true for one, and returns it; it
// fails the test if the connection ends first.
func (p *rawPeer) until(keep func(http2.Frame) bool) http2.Frame {
	for {
		f, err := p.fr.ReadFrame()
		require.NoError(p.t, err)
		if keep(f) {
			return f
		}
	}
}

// sync sends a PING with data and waits for its answer: the server has
// read every frame sent before it.
func (p *rawPeer) sync(data [8]byte) {
	require.NoError(p.t, p.fr.WritePing(false, data))
	f := p.until(func(f http2.Frame) bool { pf, ok := f.(*http2.PingFrame); return ok && pf.IsAck() }).(*http2.PingFrame)
	assert.Equal(p.t, data, f.Data)
}

// closed reports whether the server ends the connection (reading frames
// until EOF or a read error) within the connection's deadline, and the
// GOAWAY code it sent, if any.
func (p *rawPeer) closed() (bool, http2.ErrCode) {
	code := http2.ErrCode(0)
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return false, code
			}
			return true, code
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			code = g.ErrCode
		}
	}
}

// closedOrReset is closed, but it also returns, with done false, at a
// RST_STREAM on stream id, with that frame's code.
func (p *rawPeer) closedOrReset(id uint32) (done bool, code, reset http2.ErrCode) {
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout()), code, 0
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			code = f.ErrCode
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return false, code, f.ErrCode
			}
		}
	}
}

// trailer waits for stream id's closing HEADERS and returns its gRPC status.
func (p *rawPeer) trailer(id uint32) (codes.Code, string) {
	f := p.until(func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		return ok && h.StreamID == id && h.StreamEnded()
	}).(*http2.MetaHeadersFrame)
	var code codes.Code
	for _, hf := range f.Fields {
		if hf.Name == "grpc-status" {
			var n int
			for _, c := range hf.Value {
				n = n*10 + int(c-'0')
			}
			code = codes.Code(n)
		}
	}
	return code, grpcMessageDecode(headerValue(f, "grpc-message"))
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

func TestServerEndsConnectionsThatAreNotHTTP2(t *testing.T) {
	_, addr := serve(t, ServerOptions{}, &echo{})
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	_, err = io.ReadAll(nc)
	assert.NoError(t, err, "the server closes the connection (EOF), not the test's deadline")
}

func TestServerEndsSilentConnections(t *testing.T) {
	_, addr := serve(t, ServerOptions{HandshakeTimeout: 100 * time.Millisecond, IdleTimeout: 200 * time.Millisecond}, &echo{})
	start := time.Now()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(nc)
	assert.NoError(t, err, "a client that sends no preface is disconnected")
	assert.Less(t, time.Since(start), 5*time.Second)

	p := dialRaw(t, addr)
	done, _ := p.closed()
	assert.True(t, done, "a connection from which nothing arrives for IdleTimeout is closed")
}

func TestServerRefusesStreamsOverItsLimit(t *testing.T) {
	_, addr := serve(t, ServerOptions{MaxStreams: 1}, &echo{})
	p := dialRaw(t, addr)
	p.headers(1, inferMethod, false) // open, waiting for its message
	p.headers(3, inferMethod, false)
	f := p.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	assert.Equal(t, uint32(3), f.StreamID)
	assert.Equal(t, http2.ErrCodeRefusedStream, f.ErrCode)
	// The first call still runs.
	msg, err := proto.Marshal(&v2pb.ModelInferRequest{Id: "one"})
	require.NoError(t, err)
	p.message(1, msg, true)
	code, _ := p.trailer(1)
	assert.Equal(t, codes.OK, code)
}

func TestServerBoundsHeadersAndMessages(t *testing.T) {
	_, addr := serve(t, ServerOptions{MaxHeaderBytes: 1024, MaxMessageBytes: 100}, &echo{})
	p := dialRaw(t, addr)
	p.headers(1, inferMethod, true, "x-big", strings.Repeat("a", 2000))
	code, msg := p.trailer(1)
	assert.Equal(t, codes.ResourceExhausted, code, msg)

	p.headers(3, inferMethod, false)
	// The prefix claims 1 GB: refused at once, before any of it is read.
	require.NoError(t, p.fr.WriteData(3, false, []byte{0, 0x40, 0, 0, 0}))
	code, msg = p.trailer(3)
	assert.Equal(t, codes.ResourceExhausted, code)
	assert.Contains(t, msg, "larger than max")

	p.headers(5, "/no.Such/Method", true)
	code, msg = p.trailer(5)
	assert.Equal(t, codes.Unimplemented, code)
	assert.Contains(t, msg, "unknown service no.Such")

	p.headers(7, inferMethod, false, "grpc-encoding", "gzip")
	code, _ = p.trailer(7)
	assert.Equal(t, codes.Unimplemented, code)

	p.headers(9, inferMethod, false)
	p.message(9, []byte{0xff, 0xff}, true) // not protobuf
	code, _ = p.trailer(9)
	assert.Equal(t, codes.Internal, code)
}

func TestServerEndsConnectionsThatBreakFlowControl(t *testing.T) {
	_, addr := serve(t, ServerOptions{StreamWindow: 64 << 10, MaxMessageBytes: 1 << 20}, &echo{})
	p := dialRaw(t, addr)
	p.headers(1, inferMethod, false)
	// The handler takes the first message and waits; the second waits for
	// it, so the window is no longer given back; the third's bytes go past
	// the window: the stream is reset.
	slow, err := proto.Marshal(&v2pb.ModelInferRequest{ModelName: "slow"})
	require.NoError(t, err)
	p.message(1, slow, false)
	p.message(1, slow, false)
	chunk := make([]byte, 16<<10)
	binary.BigEndian.PutUint32(chunk[1:], 1<<20) // a message of 1 MiB
	for range 5 {
		require.NoError(t, p.fr.WriteData(1, false, chunk))
	}
	f := p.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	assert.Equal(t, http2.ErrCodeFlowControl, f.ErrCode)

	// A frame on stream 0 that only streams may carry ends the connection.
	require.NoError(t, p.fr.WriteRawFrame(http2.FrameData, 0, 0, []byte{1}))
	done, code := p.closed()
	assert.True(t, done)
	assert.Equal(t, http2.ErrCodeProtocol, code)
}

func TestServerAnswersPingsAndSettings(t *testing.T) {
	_, addr := serve(t, ServerOptions{}, &echo{})
	p := dialRaw(t, addr, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
	p.until(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })
	p.sync([8]byte{1, 2, 3, 4, 5, 6, 7, 8})
}

func TestGracefulStopAnswersCallsInProgress(t *testing.T) {
	impl := &echo{}
	s, addr := serve(t, ServerOptions{}, impl)
	c := NewClient(addr, ClientOptions{})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A call in progress: its headers are sent, its message not yet.
	p := dialRaw(t, addr)
	p.headers(1, inferMethod, false)
	p.sync([8]byte{9}) // the server has read the headers
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	g := p.until(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	assert.Equal(t, uint32(1), g.LastStreamID)
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned with a call in progress")
	case <-time.After(100 * time.Millisecond):
	}
	msg, err := proto.Marshal(&v2pb.ModelInferRequest{Id: "late"})
	require.NoError(t, err)
	p.message(1, msg, true)
	code, _ := p.trailer(1)
	assert.Equal(t, codes.OK, code)
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("GracefulStop did not return once the call was answered")
	}
	_, err = c.Invoke(ctx, inferMethod)
	assert.Equal(t, codes.Unavailable, status.Code(err), "a stopped server takes no call")
}

// countingSink is a bytesSink that counts its Release and Decode calls.
type countingSink struct {
	bytesSink
	released, decoded *atomic.Int32
}

func (s *countingSink) Release()           { s.released.Add(1); s.bytesSink.Release() }
func (s *countingSink) Decode(m any) error { s.decoded.Add(1); return s.bytesSink.Decode(m) }

// Every message a sink received is decoded by a handler or released: when
// the client resets the call inside a message, when it closes the
// connection inside one, and when a handler leaves messages untaken.
func TestServerReleasesEveryMessageNotTaken(t *testing.T) {
	var made, released, decoded atomic.Int32
	sink := func(method string, size int) Sink {
		made.Add(1)
		return &countingSink{bytesSink: bytesSink{size: size}, released: &released, decoded: &decoded}
	}
	_, addr := serve(t, ServerOptions{Sink: sink}, &echo{})
	settled := func(what string) {
		t.Helper()
		require.Eventually(t, func() bool { return made.Load() == released.Load()+decoded.Load() }, 5*time.Second, time.Millisecond,
			"%s: %d messages, %d released, %d decoded", what, made.Load(), released.Load(), decoded.Load())
	}
	p := dialRaw(t, addr)
	half := make([]byte, 1000)
	binary.BigEndian.PutUint32(half[1:], 5000)

	p.headers(1, inferMethod, false)
	require.NoError(t, p.fr.WriteData(1, false, half))
	require.NoError(t, p.fr.WriteRSTStream(1, http2.ErrCodeCancel))
	p.sync([8]byte{1})
	settled("reset inside a message")

	// A unary call's second and third messages are never taken.
	p.headers(3, inferMethod, false)
	msg, err := proto.Marshal(&v2pb.ModelInferRequest{ModelName: "slow"})
	require.NoError(t, err)
	p.message(3, msg, false)
	p.message(3, msg, false)
	p.message(3, msg, false)
	require.NoError(t, p.fr.WriteRSTStream(3, http2.ErrCodeCancel))
	p.sync([8]byte{2})
	settled("messages left untaken")

	p.headers(5, inferMethod, false)
	require.NoError(t, p.fr.WriteData(5, false, half))
	p.sync([8]byte{3})
	p.nc.Close()
	settled("connection closed inside a message")
	assert.Equal(t, int32(5), made.Load())
}

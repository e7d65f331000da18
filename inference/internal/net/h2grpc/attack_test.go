package h2grpc

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// blocker's ModelInfer says on started that it runs, then waits for
// release whatever its context says: a handler with work attached.
type blocker struct {
	v2pb.UnimplementedGRPCInferenceServiceServer
	started      chan uint32
	release      chan struct{}
	running, max atomic.Int32
}

func (b *blocker) ModelInfer(ctx context.Context, r *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	n := b.running.Add(1)
	defer b.running.Add(-1)
	for m := b.max.Load(); n > m && !b.max.CompareAndSwap(m, n); m = b.max.Load() {
	}
	b.started <- 0
	<-b.release
	return &v2pb.ModelInferResponse{}, nil
}

// refusedOrSynced sends a PING and reads frames up to its answer (every
// frame sent before it has been read); it reports whether stream id was
// refused meanwhile.
func (p *rawPeer) refusedOrSynced(id uint32) bool {
	require.NoError(p.t, p.fr.WritePing(false, [8]byte{9}))
	refused := false
	p.until(func(f http2.Frame) bool {
		if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == id && r.ErrCode == http2.ErrCodeRefusedStream {
			refused = true
		}
		pf, ok := f.(*http2.PingFrame)
		return ok && pf.IsAck()
	})
	return refused
}

// A call counts against MaxStreams until its handler returns, even once its
// client has reset it (Rapid Reset, CVE-2023-44487): a client that opens a
// call, waits for its handler to start and resets it, 20 times, runs at most
// MaxStreams handlers at once; the other calls are refused.
func TestResetCallsCountUntilTheirHandlersReturn(t *testing.T) {
	impl := &blocker{started: make(chan uint32, 20), release: make(chan struct{})}
	// The test PINGs after each call: let it.
	_, addr := serve(t, ServerOptions{MaxStreams: 2, MinPingInterval: time.Nanosecond}, impl)
	defer close(impl.release)
	p := dialRaw(t, addr)
	msg, err := proto.Marshal(&v2pb.ModelInferRequest{Id: "x"})
	require.NoError(t, err)
	refused := 0
	for i := range 20 {
		id := uint32(2*i + 1)
		p.headers(id, inferMethod, false)
		p.message(id, msg, true)
		if p.refusedOrSynced(id) {
			refused++
			continue
		}
		select {
		case <-impl.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("the handler of stream %d did not start", id)
		}
		require.NoError(t, p.fr.WriteRSTStream(id, http2.ErrCodeCancel))
	}
	assert.LessOrEqual(t, impl.max.Load(), int32(2), "handlers running at once")
	assert.Equal(t, 18, refused, "calls refused")
}

// A HEADERS frame on a stream id used before, or below one used, is a
// connection error PROTOCOL_ERROR (RFC 9113, 5.1.1).
func TestReusedOrLowerStreamIDsEndTheConnection(t *testing.T) {
	msg, err := proto.Marshal(&v2pb.ModelInferRequest{Id: "x"})
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		first uint32 // a call answered before
		open  uint32 // a call left open, if not 0
		next  uint32
	}{
		{"reused", 1, 0, 1},
		{"lower than an answered call", 5, 0, 3},
		{"lower than an open call", 1, 7, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := serve(t, ServerOptions{}, &echo{})
			p := dialRaw(t, addr)
			p.headers(tc.first, inferMethod, false)
			p.message(tc.first, msg, true)
			p.trailer(tc.first)
			if tc.open != 0 {
				p.headers(tc.open, inferMethod, false)
			}
			p.headers(tc.next, inferMethod, false)
			done, code, reset := p.closedOrReset(tc.next)
			if tc.next == tc.first && reset == http2.ErrCodeStreamClosed {
				// The server had not yet forgotten the answered stream: to
				// it the stream is half-closed (remote), and HEADERS there
				// is a stream error STREAM_CLOSED (RFC 9113, 5.1). Which of
				// the two it meets depends on scheduling; both are right.
				return
			}
			assert.True(t, done, "connection closed")
			assert.Equal(t, http2.ErrCodeProtocol, code, "GOAWAY's code")
		})
	}
}

// A header block is bounded in frames and in the size of each: a flood of
// empty CONTINUATION frames, or a HEADERS frame over maxHeaderFrame, ends
// the connection at once instead of being read until the idle timeout.
func TestHeaderBlockFloodsEndTheConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(p *rawPeer)
		code http2.ErrCode
	}{
		{"empty CONTINUATION frames", func(p *rawPeer) {
			p.buf.Reset()
			p.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "POST"})
			require.NoError(t, p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: p.buf.Bytes()}))
			for range maxHeaderBlockFrames { // the last makes a block of one frame too many
				if p.fr.WriteContinuation(1, false, nil) != nil {
					return // the server has closed the connection
				}
			}
		}, http2.ErrCodeEnhanceYourCalm},
		{"a HEADERS frame over 16 KiB", func(p *rawPeer) {
			p.buf.Reset()
			p.enc.WriteField(hpack.HeaderField{Name: "x-big", Value: strings.Repeat("a", 2*maxHeaderFrame)})
			require.NoError(t, p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: p.buf.Bytes(), EndHeaders: true}))
		}, http2.ErrCodeFrameSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := serve(t, ServerOptions{}, &echo{})
			p := dialRaw(t, addr, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
			tc.send(p)
			done, code := p.closed()
			assert.True(t, done, "connection closed")
			assert.Equal(t, tc.code, code, "GOAWAY's code")
		})
	}
}

// A malformed request (RFC 9113, 8.2 and 8.3) is a stream error
// PROTOCOL_ERROR, not a call: the connection goes on.
func TestMalformedRequestsAreResetStreams(t *testing.T) {
	base := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", inferMethod}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"te", "trailers"}}
	with := func(extra ...[2]string) [][2]string { return append(append([][2]string{}, base...), extra...) }
	for _, tc := range []struct {
		name   string
		fields [][2]string
	}{
		{"uppercase name", with([2]string{"X-Upper", "1"})},
		{"unknown pseudo-header", with([2]string{":foo", "1"})},
		{"response pseudo-header", with([2]string{":status", "200"})},
		{"pseudo-header after a regular field", append(with(), [2]string{":authority", "y"})},
		{"duplicated :path", append([][2]string{{":path", "/a"}}, base...)},
		{"connection-specific field", with([2]string{"connection", "keep-alive"})},
		{"te other than trailers", with([2]string{"te", "gzip"})},
		{"no :path", base[:2]},
		{"empty :path", [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", ""}}},
		{"a value with a newline", with([2]string{"x-a", "1\n2"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := serve(t, ServerOptions{}, &echo{})
			p := dialRaw(t, addr)
			p.buf.Reset()
			for _, f := range tc.fields {
				p.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			require.NoError(t, p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: p.buf.Bytes(), EndHeaders: true, EndStream: true}))
			f := p.until(func(f http2.Frame) bool {
				_, rst := f.(*http2.RSTStreamFrame)
				h, ok := f.(*http2.MetaHeadersFrame)
				return rst || ok && h.StreamEnded()
			})
			require.IsType(t, &http2.RSTStreamFrame{}, f, "the answer")
			assert.Equal(t, http2.ErrCodeProtocol, f.(*http2.RSTStreamFrame).ErrCode)
			p.sync([8]byte{1})
		})
	}
}

// selfSigned returns a certificate for 127.0.0.1 made now, and a pool that
// trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "h2grpc test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// The server and the client work over TLS (a *tls.Conn: no writev, one
// write a slice), with each other and with grpc-go's client, for a message
// larger than a frame and a flow-control window.
func TestServerAndClientOverTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := tls.NewListener(tcp, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	s := NewServer(ServerOptions{MaxMessageBytes: 8 << 20, StreamWindow: 64 << 10})
	v2pb.RegisterGRPCInferenceServiceServer(s, &echo{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	defer func() {
		s.Stop()
		assert.ErrorIs(t, <-done, ErrServerStopped)
	}()
	addr := tcp.Addr().String()
	clientTLS := &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}}
	raw := pattern(3 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c := NewClient(addr, ClientOptions{MaxMessageBytes: 8 << 20, Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		d := tls.Dialer{Config: clientTLS}
		return d.DialContext(ctx, "tcp", addr)
	}})
	defer c.Close()
	resp, err := invoke(ctx, c, &v2pb.ModelInferRequest{Id: "tls", RawInputContents: [][]byte{raw}})
	require.NoError(t, err)
	require.Len(t, resp.GetRawOutputContents(), 1)
	assert.Equal(t, reversed(raw), resp.GetRawOutputContents()[0])

	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
	require.NoError(t, err)
	defer cc.Close()
	resp, err = v2pb.NewGRPCInferenceServiceClient(cc).ModelInfer(ctx, &v2pb.ModelInferRequest{Id: "tls", RawInputContents: [][]byte{raw}})
	require.NoError(t, err)
	assert.Equal(t, reversed(raw), resp.GetRawOutputContents()[0])
}

// lockedBuffer is a bytes.Buffer for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// The lines logged about bad peers are rate-limited: 20 connections that
// are not HTTP/2 leave peerLogLines lines, not 20.
func TestPeerWarningsAreRateLimited(t *testing.T) {
	var out lockedBuffer
	s, addr := serve(t, ServerOptions{Log: slog.New(slog.NewTextHandler(&out, nil))}, &echo{})
	for range 20 {
		nc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.WriteString(nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		_, err = io.ReadAll(nc)
		require.NoError(t, err, "the server closes the connection")
		nc.Close()
	}
	s.Stop() // every connection's goroutine has logged and returned
	lines := strings.Count(out.String(), "grpc connection ended")
	assert.Equal(t, peerLogLines, lines, "lines logged about 20 bad peers:\n%s", out.String())
}

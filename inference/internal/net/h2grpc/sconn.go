package h2grpc

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// serverConn is one client's connection. Its reader goroutine (serve) reads
// every frame; each call's handler runs in a goroutine of its own and writes
// its answer under wmu.
type serverConn struct {
	conn
	s      *Server
	ctx    context.Context
	cancel context.CancelFunc

	// Guarded by mu.
	streams   map[uint32]*serverStream
	maxID     uint32 // highest stream a client has opened
	goingAway bool   // no new streams; close when the last ends
	closed    bool
	ended     []*serverStream // streams ended since the reader last looked
	// calls counts the calls counted against MaxStreams: from their
	// HEADERS until their handler has returned and their answer is being
	// written, a reset (RST_STREAM) or not.
	calls int

	// born and active time the connection's idleness: active is when a
	// call last began, sent request bytes or ended, as time since born.
	born     time.Time
	active   atomic.Int64
	idle     *time.Timer // closes the connection IdleTimeout after active
	answered atomic.Bool // HEADERS or DATA sent since the last PING

	// PING enforcement; reader only.
	lastPing    time.Time
	pingStrikes int
}

func newServerConn(s *Server, nc net.Conn) *serverConn {
	c := &serverConn{s: s, streams: map[uint32]*serverStream{}, born: time.Now()}
	c.init(nc, 4*int64(s.opts.StreamWindow), s.opts.MaxHeaderBytes, s.opts.WriteTimeout)
	c.windows, c.window = streamWindows(&c.streams, func(st *serverStream) *int64 { return &st.sendWindow })
	c.ctx, c.cancel = context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{Addr: nc.RemoteAddr(), LocalAddr: nc.LocalAddr()}))
	return c
}

// serve runs the connection until it fails or closes.
func (c *serverConn) serve() {
	err := c.run()
	var ce connError
	if errors.As(err, &ce) {
		c.mu.Lock()
		last := c.maxID
		c.mu.Unlock()
		c.write(appendGoAway(nil, last, ce.code, ce.msg))
		linger(c.nc)
	}
	if c.s.log != nil && unexpected(err) {
		c.s.log.Warn("grpc connection ended", "peer", c.nc.RemoteAddr().String(), "err", err)
	}
	c.close()
}

// Bounds of linger.
const (
	lingerTime  = time.Second
	lingerBytes = 1 << 20
)

// linger half-closes nc after a GOAWAY and reads what the peer still sends,
// for at most lingerTime and lingerBytes, so that closing does not reset a
// connection with unread bytes and lose the GOAWAY before the peer reads it.
func linger(nc net.Conn) {
	var cw interface{ CloseWrite() error }
	for c := net.Conn(nc); c != nil && cw == nil; {
		switch x := c.(type) {
		case interface{ CloseWrite() error }:
			cw = x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			c = nil
		}
	}
	if cw == nil || cw.CloseWrite() != nil {
		return
	}
	_ = nc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.Copy(io.Discard, io.LimitReader(nc, lingerBytes))
}

// unexpected reports whether a connection's end is worth a log line: not a
// client that left (EOF, reset), a connection closed here, or one idle past
// its deadline.
func unexpected(err error) bool {
	return err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) &&
		!errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, syscall.ECONNRESET)
}

// close ends every stream and the connection.
func (c *serverConn) close() {
	c.nc.Close()
	c.cancel()
	c.mu.Lock()
	if c.idle != nil {
		c.idle.Stop()
	}
	c.closed = true
	streams := c.streams
	c.streams = map[uint32]*serverStream{}
	ended := c.ended
	c.ended = nil
	c.cond.Broadcast()
	c.mu.Unlock()
	for _, st := range streams {
		st.resetRecv()
		st.in.release()
	}
	for _, st := range ended {
		st.in.release()
	}
}

func (c *serverConn) run() error {
	o := &c.s.opts
	c.nc.SetReadDeadline(time.Now().Add(o.HandshakeTimeout))
	var p [len(preface)]byte
	if _, err := io.ReadFull(c.br, p[:]); err != nil {
		return fmt.Errorf("reading the client preface: %w", err)
	}
	if string(p[:]) != preface {
		return errors.New("not an HTTP/2 client preface (is the client speaking HTTP/1 or TLS?)")
	}
	b := c.hello(nil,
		setting{http2.SettingMaxConcurrentStreams, o.MaxStreams},
		setting{http2.SettingInitialWindowSize, uint32(o.StreamWindow)},
		setting{http2.SettingMaxFrameSize, maxFrame},
		setting{http2.SettingMaxHeaderListSize, uint32(o.MaxHeaderBytes)})
	if err := c.write(b); err != nil {
		return err
	}
	if o.OnConn != nil {
		o.OnConn(c.nc, func() { c.goAway("too many connections") })
	}
	h, err := readFrameHeader(c.br, &c.hdr)
	if err != nil {
		return err
	}
	if h.typ != http2.FrameSettings || h.has(http2.FlagSettingsAck) {
		return protocolError("first frame is %v, not SETTINGS", h.typ)
	}
	// From here on the idle timer, not a read deadline, ends a connection
	// that asks for nothing: control frames (PING, SETTINGS, WINDOW_UPDATE)
	// do not count as requests.
	c.nc.SetReadDeadline(time.Time{})
	c.touch()
	c.mu.Lock()
	if !c.closed {
		c.idle = time.AfterFunc(o.IdleTimeout, c.checkIdle)
	}
	c.mu.Unlock()
	for {
		if err := c.frame(h); err != nil {
			return err
		}
		c.reap()
		if h, err = readFrameHeader(c.br, &c.hdr); err != nil {
			return err
		}
	}
}

// touch notes a request: a call begun, its bytes received, or its end.
func (c *serverConn) touch() { c.active.Store(int64(time.Since(c.born))) }

// checkIdle runs when the idle timer fires: it closes the connection
// (GOAWAY, then the socket) if nothing was requested for IdleTimeout, else
// sets the timer for when that would be.
func (c *serverConn) checkIdle() {
	idle := time.Since(c.born) - time.Duration(c.active.Load())
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if left := c.s.opts.IdleTimeout - idle; left > 0 {
		c.idle.Reset(left)
		c.mu.Unlock()
		return
	}
	c.goingAway = true
	last := c.maxID
	c.mu.Unlock()
	c.write(appendGoAway(nil, last, http2.ErrCodeNo, "idle"))
	c.nc.Close()
}

// reap releases the message each ended stream was receiving; only the
// reader, which fills them, may.
func (c *serverConn) reap() {
	c.mu.Lock()
	ended := c.ended
	c.ended = nil
	c.mu.Unlock()
	for _, st := range ended {
		st.in.release()
	}
}

// frame handles one frame whose header has been read.
func (c *serverConn) frame(h frameHeader) error {
	if h.length > maxFrame {
		return connError{http2.ErrCodeFrameSize, fmt.Sprintf("%v frame of %d bytes (at most %d)", h.typ, h.length, maxFrame)}
	}
	switch h.typ {
	case http2.FrameData:
		return c.onData(h)
	case http2.FrameHeaders:
		if h.length > maxHeaderFrame {
			return connError{http2.ErrCodeFrameSize, fmt.Sprintf("HEADERS frame of %d bytes (at most %d)", h.length, maxHeaderFrame)}
		}
		return c.onHeaders(h)
	case http2.FrameSettings:
		return c.onSettings(h)
	case http2.FrameWindowUpdate:
		c.mu.Lock()
		idle := h.stream > c.maxID
		c.mu.Unlock()
		if idle {
			return protocolError("WINDOW_UPDATE on idle stream %d", h.stream)
		}
		code, err := c.onWindowUpdate(h)
		if code != 0 {
			c.resetID(h.stream, code)
		}
		return err
	case http2.FramePing:
		if h.length == 8 && h.stream == 0 && !h.has(http2.FlagPingAck) {
			if err := c.enforcePing(); err != nil {
				return err
			}
		}
		return c.onPing(h)
	case http2.FrameRSTStream:
		if h.length != 4 || h.stream == 0 {
			return protocolError("malformed RST_STREAM")
		}
		if _, err := c.br.Discard(4); err != nil {
			return err
		}
		if st := c.stream(h.stream); st != nil {
			// The stream ends here; its handler, told by its context,
			// counts against MaxStreams until it returns.
			st.reset.Store(true)
			c.endStream(st)
		} else if h.stream > c.maxID {
			return protocolError("RST_STREAM on idle stream %d", h.stream)
		}
		return nil
	case http2.FramePriority:
		if h.stream == 0 {
			return protocolError("PRIORITY on stream 0")
		}
		if h.length != 5 {
			return connError{http2.ErrCodeFrameSize, "malformed PRIORITY"}
		}
		var b [5]byte
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return err
		}
		if binary.BigEndian.Uint32(b[:])&(1<<31-1) == h.stream {
			c.resetID(h.stream, http2.ErrCodeProtocol)
		}
		return nil
	case http2.FramePushPromise:
		return protocolError("PUSH_PROMISE from a client")
	case http2.FrameContinuation:
		return protocolError("CONTINUATION without HEADERS")
	case http2.FrameGoAway:
		if h.stream != 0 {
			return protocolError("GOAWAY on stream %d", h.stream)
		}
		c.mu.Lock()
		c.goingAway = true
		c.mu.Unlock()
	}
	// GOAWAY's payload and unknown frame types are skipped.
	_, err := c.br.Discard(int(h.length))
	return err
}

// The PING policy, grpc-go's keepalive enforcement: a PING sooner than
// ServerOptions.MinPingInterval after the last (or, with no call running
// and PermitPingWithoutCalls off, sooner than pingWithoutCallsInterval) is
// a strike, and more than maxPingStrikes strikes end the connection with
// GOAWAY ENHANCE_YOUR_CALM "too_many_pings". An answer sent (HEADERS or
// DATA) clears the strikes: clients that time PINGs by what they receive
// (grpc-go's BDP estimator) stay within the policy.
const (
	maxPingStrikes           = 2
	pingWithoutCallsInterval = 2 * time.Hour
)

// enforcePing applies the PING policy to a PING just received.
func (c *serverConn) enforcePing() error {
	now := time.Now()
	last := c.lastPing
	c.lastPing = now
	if c.answered.Swap(false) {
		c.pingStrikes = 0
		return nil
	}
	o := &c.s.opts
	c.mu.Lock()
	calls := c.calls
	c.mu.Unlock()
	interval := o.MinPingInterval
	if calls == 0 && !o.PermitPingWithoutCalls {
		interval = max(interval, pingWithoutCallsInterval)
	}
	if !last.IsZero() && now.Sub(last) < interval {
		c.pingStrikes++
	}
	if c.pingStrikes > maxPingStrikes {
		return connError{http2.ErrCodeEnhanceYourCalm, "too_many_pings"}
	}
	return nil
}

// resetID ends stream id with RST_STREAM code, open or not.
func (c *serverConn) resetID(id uint32, code http2.ErrCode) {
	if st := c.stream(id); st != nil {
		c.resetStream(st, code)
		return
	}
	c.write(appendRST(nil, id, code))
}

func (c *serverConn) stream(id uint32) *serverStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// onData reads a DATA frame's payload into its stream's messages.
func (c *serverConn) onData(h frameHeader) error {
	if h.stream == 0 {
		return protocolError("DATA on stream 0")
	}
	n, pad, err := c.dataHeader(h)
	if err != nil {
		return err
	}
	st := c.stream(h.stream)
	if st == nil || st.ended() {
		if st == nil && h.stream > c.maxID {
			return protocolError("DATA on idle stream %d", h.stream)
		}
		if _, err := c.br.Discard(n + pad); err != nil {
			return err
		}
		if st != nil {
			// After the client's END_STREAM (half-closed, remote).
			c.resetStream(st, http2.ErrCodeStreamClosed)
		}
		// On a closed stream: DATA the client sent before it learnt that
		// the call had ended is dropped.
		return c.taken(int64(h.length))
	}
	if n > 0 {
		c.touch()
	}
	if !st.admit(int64(h.length)) {
		if _, err := c.br.Discard(n + pad); err != nil {
			return err
		}
		c.resetStream(st, http2.ErrCodeFlowControl)
		return c.taken(int64(h.length))
	}
	if err := st.receive(c.br, n); err != nil {
		return err
	}
	if _, err := c.br.Discard(pad); err != nil {
		return err
	}
	if err := c.taken(int64(h.length)); err != nil {
		return err
	}
	st.taken(int64(h.length))
	if h.has(http2.FlagDataEndStream) {
		st.endRecv()
	}
	return nil
}

// taken gives n bytes of connection window back to the client once a
// quarter of the window has been read.
func (c *serverConn) taken(n int64) error {
	if b := c.conn.taken(nil, n); b != nil {
		return c.write(b)
	}
	return nil
}

func (c *serverConn) onHeaders(h frameHeader) error {
	if h.stream == 0 || h.stream%2 == 0 {
		return protocolError("HEADERS on stream %d", h.stream)
	}
	fields, tooLarge, buf, err := c.hb.read(c.br, h, c.scratch)
	c.scratch = buf[:0]
	if err != nil {
		return err
	}
	endStream := h.has(http2.FlagHeadersEndStream)
	if st := c.stream(h.stream); st != nil {
		switch {
		case st.ended():
			// Half-closed (remote): the client has ended its side.
			c.resetStream(st, http2.ErrCodeStreamClosed)
		case !endStream || c.hb.selfDependent || checkTrailers(fields) != nil:
			c.resetStream(st, http2.ErrCodeProtocol)
		default:
			// Trailers from the client end its side.
			st.endRecv()
		}
		return nil
	}
	if h.stream <= c.maxID {
		// A stream id used before, or below one used: RFC 9113, 5.1.1.
		return protocolError("HEADERS on stream %d, not above the last stream opened (%d)", h.stream, c.maxID)
	}
	c.mu.Lock()
	c.maxID = h.stream
	// A call counts until its handler has returned, reset or not (Rapid
	// Reset: a client that resets its calls cannot run more at once).
	refuse := c.goingAway || c.calls >= int(c.s.opts.MaxStreams)
	c.mu.Unlock()
	c.touch()
	if !tooLarge && (c.hb.selfDependent || checkRequestHeaders(fields) != nil) {
		// A malformed request is a stream error (RFC 9113, 8.1.1).
		return c.write(appendRST(nil, h.stream, http2.ErrCodeProtocol))
	}
	if refuse {
		return c.write(appendRST(nil, h.stream, http2.ErrCodeRefusedStream))
	}
	var path, method, contentType, timeout, encoding string
	var md metadata.MD // made for the first field the handler may read
	for _, f := range fields {
		switch f.Name {
		case ":path":
			path = f.Value
		case ":method":
			method = f.Value
		case "content-type":
			contentType = f.Value
		case "grpc-timeout":
			timeout = f.Value
		case "grpc-encoding":
			encoding = f.Value
		case ":scheme", ":authority", "te", "grpc-accept-encoding", "connection":
		default:
			if strings.HasPrefix(f.Name, ":") {
				continue
			}
			v := f.Value
			if strings.HasSuffix(f.Name, "-bin") {
				b, err := decodeBinaryHeader(v)
				if err != nil {
					continue
				}
				v = b
			}
			if md == nil {
				md = metadata.MD{}
			}
			md.Append(f.Name, v)
		}
	}
	st := c.newStream(h.stream, path, endStream)
	switch {
	case tooLarge:
		return st.refuse(status.Newf(codes.ResourceExhausted, "header list larger than %d bytes", c.s.opts.MaxHeaderBytes))
	case method != http.MethodPost:
		return st.refuseHTTP(http.StatusMethodNotAllowed)
	case !isGRPCContentType(contentType):
		return st.refuseHTTP(http.StatusUnsupportedMediaType)
	case encoding != "" && encoding != "identity":
		return st.refuse(status.Newf(codes.Unimplemented, "grpc: Decompressor is not installed for grpc-encoding %q", encoding))
	}
	m, ok := c.s.methods[path]
	if !ok {
		svc, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
		if _, known := c.s.services[svc]; known {
			return st.refuse(status.Newf(codes.Unimplemented, "unknown method %s", path))
		}
		return st.refuse(status.Newf(codes.Unimplemented, "unknown service %s", svc))
	}
	ctx := c.ctx
	if md != nil {
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	var cancel context.CancelFunc
	if timeout != "" {
		d, err := parseTimeout(timeout)
		if err != nil {
			return st.refuse(status.New(codes.Internal, err.Error()))
		}
		ctx, cancel = context.WithTimeout(ctx, d)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	st.ctx, st.cancel = ctx, cancel
	context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	c.mu.Lock()
	c.streams[st.id] = st
	c.calls++
	st.counted = true
	c.reportIdle(c.calls == 1, false)
	c.mu.Unlock()
	c.s.workers.run(func() { st.run(m) })
	return nil
}

// decodeBinaryHeader decodes a -bin header's base64, padded or not.
func decodeBinaryHeader(v string) (string, error) {
	if len(v)%4 == 0 {
		b, err := base64.StdEncoding.DecodeString(v)
		return string(b), err
	}
	b, err := base64.RawStdEncoding.DecodeString(v)
	return string(b), err
}

// resetStream ends st with RST_STREAM code.
func (c *serverConn) resetStream(st *serverStream, code http2.ErrCode) {
	if !st.reset.Swap(true) {
		c.write(appendRST(nil, st.id, code))
	}
	c.endStream(st)
}

// endStream forgets st: its context is cancelled and messages not yet
// taken are released.
func (c *serverConn) endStream(st *serverStream) {
	c.mu.Lock()
	if c.streams[st.id] != st {
		c.mu.Unlock()
		return
	}
	delete(c.streams, st.id)
	c.ended = append(c.ended, st)
	last := c.goingAway && len(c.streams) == 0
	c.cond.Broadcast()
	c.mu.Unlock()
	st.resetRecv()
	if last {
		c.nc.Close()
	}
}

// goAway tells the client that no new call will be taken (GOAWAY with the
// last stream it opened, and why) and closes the connection once its calls
// end.
func (c *serverConn) goAway(why string) {
	c.mu.Lock()
	c.goingAway = true
	last, idle := c.maxID, len(c.streams) == 0
	c.mu.Unlock()
	c.write(appendGoAway(nil, last, http2.ErrCodeNo, why))
	if idle {
		c.nc.Close()
	}
}

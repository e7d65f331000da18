package h2grpc

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// MaxMessageBytes bounds a received message; 0 means 4 MiB.
	MaxMessageBytes int
	// StreamWindow is each call's receive window; a connection's is 4
	// times it. 0 means 4 MiB.
	StreamWindow int32
	// Dial opens the connection; nil means a TCP dial.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// WriteTimeout bounds each write: a server that reads nothing for this
	// long is disconnected; 0 means 30 seconds.
	WriteTimeout time.Duration
}

// Client makes unary gRPC calls over one HTTP/2 connection to a server
// (cleartext, or TLS with a Dial that returns a *tls.Conn), opened on the
// first call and again after it fails. A request's message goes from the
// caller's memory to the socket in one writev a flow-control window (one
// write a slice over TLS), without a copy. It is safe for concurrent use.
type Client struct {
	addr string
	opts ClientOptions

	mu     sync.Mutex
	cc     *clientConn
	closed bool
}

// NewClient returns a client of the server at addr ("host:port").
func NewClient(addr string, opts ClientOptions) *Client {
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 4 << 20
	}
	if opts.StreamWindow <= 0 {
		opts.StreamWindow = 4 << 20
	}
	opts.StreamWindow = min(max(opts.StreamWindow, defaultWindow), maxWindow/4)
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.Dial == nil {
		opts.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return new(net.Dialer).DialContext(ctx, "tcp", addr)
		}
	}
	return &Client{addr: addr, opts: opts}
}

// Close closes the connection; calls in progress fail.
func (c *Client) Close() error {
	c.mu.Lock()
	cc := c.cc
	c.cc, c.closed = nil, true
	c.mu.Unlock()
	if cc != nil {
		cc.shut(ErrClosed)
	}
	return nil
}

// conn returns the connection, dialling one if there is none or the last
// has failed or is going away.
func (c *Client) conn(ctx context.Context) (*clientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, status.Error(codes.Canceled, "h2grpc: client closed")
	}
	if c.cc != nil && c.cc.usable() {
		return c.cc, nil
	}
	nc, err := c.opts.Dial(ctx, c.addr)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "h2grpc: dial %s: %v", c.addr, err)
	}
	cc, err := newClientConn(nc, c.addr, c.opts)
	if err != nil {
		nc.Close()
		return nil, status.Errorf(codes.Unavailable, "h2grpc: %v", err)
	}
	// The server's SETTINGS come first: until then its limits (concurrent
	// calls, frame sizes) are unknown, and calls it would refuse could go.
	timer := time.NewTimer(handshakeTimeout)
	defer timer.Stop()
	select {
	case <-cc.settled:
	case <-cc.dead:
		return nil, status.Errorf(codes.Unavailable, "h2grpc: %s: %v", c.addr, cc.deadErr())
	case <-timer.C:
		cc.shut(errors.New("no SETTINGS from the server"))
		return nil, status.Errorf(codes.Unavailable, "h2grpc: %s sent no SETTINGS within %v", c.addr, handshakeTimeout)
	case <-ctx.Done():
		cc.shut(ctx.Err())
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	c.cc = cc
	return cc, nil
}

// handshakeTimeout bounds the wait for a new connection's SETTINGS.
const handshakeTimeout = 10 * time.Second

// Invoke calls method ("/package.Service/Method") with the request message
// made of parts (its encoding, in order; they are not copied, and must not
// change until Invoke returns) and returns the response message's bytes. A
// call that fails returns a status error.
func (c *Client) Invoke(ctx context.Context, method string, parts ...[]byte) ([]byte, error) {
	cc, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	return cc.invoke(ctx, method, parts)
}

// clientConn is one connection; its reader goroutine reads every frame.
type clientConn struct {
	conn
	authority string
	opts      ClientOptions

	// Guarded by mu.
	settled   chan struct{} // closed when the server's first SETTINGS are applied
	dead      chan struct{} // closed when the connection ends (err set)
	streams   map[uint32]*clientStream
	opening   int // calls between waiting for a stream and opening it
	nextID    uint32
	goingAway bool
	err       error // why the connection ended; nil while it runs
}

type clientStream struct {
	id         uint32
	sendWindow int64 // guarded by cc.mu
	done       chan struct{}

	// Owned by the reader goroutine until done is closed.
	gotHeaders bool
	in         inbound
	msg        *bytesSink // the answer, once received whole
	unacked    int64
	status     *status.Status
}

func newClientConn(nc net.Conn, authority string, opts ClientOptions) (*clientConn, error) {
	cc := &clientConn{authority: authority, opts: opts, streams: map[uint32]*clientStream{}, nextID: 1,
		settled: make(chan struct{}), dead: make(chan struct{})}
	cc.init(nc, 4*int64(opts.StreamWindow), 64<<10, opts.WriteTimeout)
	cc.windows, cc.window = streamWindows(&cc.streams, func(st *clientStream) *int64 { return &st.sendWindow })
	b := cc.hello([]byte(preface),
		setting{http2.SettingEnablePush, 0},
		setting{http2.SettingInitialWindowSize, uint32(opts.StreamWindow)},
		setting{http2.SettingMaxFrameSize, maxFrame},
		setting{http2.SettingMaxHeaderListSize, 64 << 10})
	if err := cc.write(b); err != nil {
		return nil, err
	}
	go cc.readLoop()
	return cc, nil
}

// deadErr is why the connection ended.
func (cc *clientConn) deadErr() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err
}

func (cc *clientConn) usable() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err == nil && !cc.goingAway && cc.nextID < 1<<31-1
}

// shut ends the connection and every call on it with err.
func (cc *clientConn) shut(err error) {
	cc.nc.Close()
	cc.mu.Lock()
	if cc.err == nil {
		cc.err = err
		close(cc.dead)
	}
	streams := cc.streams
	cc.streams = map[uint32]*clientStream{}
	cc.cond.Broadcast()
	cc.mu.Unlock()
	for _, st := range streams {
		st.status = status.Newf(codes.Unavailable, "h2grpc: connection ended: %v", err)
		close(st.done)
	}
}

func (cc *clientConn) invoke(ctx context.Context, method string, parts [][]byte) ([]byte, error) {
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	parts = append([][]byte{messagePrefix(size)}, parts...)
	left := size + 5

	fields := []string{":method", "POST", ":scheme", "http", ":path", method, ":authority", cc.authority,
		"content-type", "application/grpc", "te", "trailers", "user-agent", "inferbench-h2grpc"}
	if d, ok := ctx.Deadline(); ok {
		fields = append(fields, "grpc-timeout", formatTimeout(time.Until(d)))
	}
	stop := context.AfterFunc(ctx, func() {
		cc.mu.Lock()
		cc.cond.Broadcast()
		cc.mu.Unlock()
	})
	defer stop()
	// Wait for a stream the server allows (SETTINGS_MAX_CONCURRENT_STREAMS).
	cc.mu.Lock()
	for cc.err == nil && !cc.goingAway && ctx.Err() == nil && len(cc.streams)+cc.opening >= int(cc.peer.maxStreams) {
		cc.cond.Wait()
	}
	if ctx.Err() != nil {
		cc.mu.Unlock()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	cc.opening++
	cc.mu.Unlock()
	// The stream's number is taken under the write lock: a client must
	// open streams in the order of their numbers.
	st := &clientStream{done: make(chan struct{})}
	cc.wmu.Lock()
	cc.mu.Lock()
	cc.opening--
	if cc.err != nil || cc.goingAway {
		cc.mu.Unlock()
		cc.wmu.Unlock()
		return nil, status.Error(codes.Unavailable, "h2grpc: connection closed")
	}
	st.id = cc.nextID
	cc.nextID += 2
	st.sendWindow = int64(cc.peer.window)
	cc.streams[st.id] = st
	n, _ := cc.reserveLocked(&st.sendWindow, left)
	maxFrame := cc.peer.maxFrame
	cc.mu.Unlock()
	b := cc.hw.appendBlock(cc.wbuf[:0], st.id, false, maxFrame, fields...)
	parts, err := cc.writeDataLocked(b, parts, n, maxFrame, st.id, n == left, nil)
	cc.wmu.Unlock()
	left -= n
	for err == nil && left > 0 {
		n, maxFrame, err = cc.reserve(ctx, st, left)
		if err == errAnswered {
			break
		}
		if err != nil {
			cc.abort(st, status.Convert(err))
			return nil, err
		}
		cc.wmu.Lock()
		parts, err = cc.writeDataLocked(cc.wbuf[:0], parts, n, maxFrame, st.id, n == left, nil)
		cc.wmu.Unlock()
		left -= n
	}
	if err != nil && err != errAnswered {
		cc.shut(err)
	}
	select {
	case <-st.done:
	case <-ctx.Done():
		s := status.FromContextError(ctx.Err())
		if !cc.abort(st, s) {
			// The answer came as the context ended: it stands.
			break
		}
		return nil, s.Err()
	}
	if st.status.Code() != codes.OK {
		if d, ok := ctx.Deadline(); ok && st.status.Code() == codes.Canceled && !time.Now().Before(d) {
			// The server reset the call as its deadline passed (grpc-go
			// does), maybe before this context's timer fired: the
			// deadline is the cause.
			return nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
		return nil, st.status.Err()
	}
	if st.msg == nil {
		return nil, status.Error(codes.Internal, "h2grpc: no response message to a unary call")
	}
	return st.msg.buf, nil
}

// abort ends a call that is still open with s and tells the server
// (RST_STREAM(CANCEL)); it reports whether the call was open.
func (cc *clientConn) abort(st *clientStream, s *status.Status) bool {
	if !cc.end(st, s) {
		return false
	}
	cc.write(appendRST(nil, st.id, http2.ErrCodeCancel))
	return true
}

// reserve waits for send window on st and the connection and takes up to
// want bytes of both.
func (cc *clientConn) reserve(ctx context.Context, st *clientStream, want int) (int, uint32, error) {
	return cc.conn.reserve(&st.sendWindow, want, func() error {
		switch {
		case cc.err != nil:
			return status.Errorf(codes.Unavailable, "h2grpc: connection ended: %v", cc.err)
		case cc.streams[st.id] != st:
			// The server answered (or reset the call) before taking all
			// of the request: wait for its answer.
			return errAnswered
		case ctx.Err() != nil:
			return status.FromContextError(ctx.Err()).Err()
		}
		return nil
	})
}

var errAnswered = errors.New("h2grpc: answered before the request was sent")

// readLoop reads frames until the connection fails.
func (cc *clientConn) readLoop() {
	err := cc.read()
	var ce connError
	if errors.As(err, &ce) {
		cc.write(appendGoAway(nil, 0, ce.code, ce.msg))
	}
	cc.shut(err)
}

func (cc *clientConn) read() error {
	settled := false
	for {
		h, err := readFrameHeader(cc.br, &cc.hdr)
		if err != nil {
			return err
		}
		if !settled && h.typ != http2.FrameSettings {
			return protocolError("the server's first frame is %v, not SETTINGS", h.typ)
		}
		if h.length > maxFrame {
			return connError{http2.ErrCodeFrameSize, "frame too large"}
		}
		switch h.typ {
		case http2.FrameData:
			err = cc.onData(h)
		case http2.FrameHeaders:
			err = cc.onHeaders(h)
		case http2.FrameSettings:
			if err = cc.onSettings(h); err == nil && !h.has(http2.FlagSettingsAck) && !settled {
				settled = true
				close(cc.settled)
			}
		case http2.FrameWindowUpdate:
			var code http2.ErrCode
			code, err = cc.onWindowUpdate(h)
			if st := cc.stream(h.stream); code != 0 && st != nil {
				cc.abort(st, status.New(codes.Internal, "h2grpc: the server's WINDOW_UPDATE of the stream was 0 or overflowed its window"))
			}
		case http2.FramePing:
			err = cc.onPing(h)
		case http2.FrameRSTStream:
			err = cc.onReset(h)
		case http2.FrameGoAway:
			err = cc.onGoAway(h)
		case http2.FramePushPromise:
			return protocolError("PUSH_PROMISE after SETTINGS_ENABLE_PUSH 0")
		case http2.FrameContinuation:
			return protocolError("CONTINUATION without HEADERS")
		default:
			_, err = cc.br.Discard(int(h.length))
		}
		if err != nil {
			return err
		}
	}
}

func (cc *clientConn) stream(id uint32) *clientStream {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.streams[id]
}

// end completes st with s, once; it reports whether st was open.
func (cc *clientConn) end(st *clientStream, s *status.Status) bool {
	cc.mu.Lock()
	open := cc.streams[st.id] == st
	if open {
		delete(cc.streams, st.id)
		st.status = s
		close(st.done)
		cc.cond.Broadcast()
	}
	cc.mu.Unlock()
	return open
}

func (cc *clientConn) onReset(h frameHeader) error {
	if h.length != 4 {
		return connError{http2.ErrCodeFrameSize, "malformed RST_STREAM"}
	}
	var b [4]byte
	if _, err := io.ReadFull(cc.br, b[:]); err != nil {
		return err
	}
	st := cc.stream(h.stream)
	if st == nil {
		return nil
	}
	code := http2.ErrCode(binary.BigEndian.Uint32(b[:]))
	c := codes.Internal
	switch code {
	case http2.ErrCodeRefusedStream:
		c = codes.Unavailable
	case http2.ErrCodeCancel:
		c = codes.Canceled
	case http2.ErrCodeEnhanceYourCalm:
		c = codes.ResourceExhausted
	}
	cc.end(st, status.Newf(c, "stream terminated by RST_STREAM with error code: %v", code))
	return nil
}

func (cc *clientConn) onGoAway(h frameHeader) error {
	if h.length < 8 {
		return connError{http2.ErrCodeFrameSize, "malformed GOAWAY"}
	}
	var b [8]byte
	if _, err := io.ReadFull(cc.br, b[:]); err != nil {
		return err
	}
	if _, err := cc.br.Discard(int(h.length) - 8); err != nil {
		return err
	}
	last := binary.BigEndian.Uint32(b[:]) & (1<<31 - 1)
	cc.mu.Lock()
	cc.goingAway = true
	var refused []*clientStream
	for id, st := range cc.streams {
		if id > last {
			refused = append(refused, st)
		}
	}
	cc.mu.Unlock()
	for _, st := range refused {
		cc.end(st, status.New(codes.Unavailable, "h2grpc: the server is going away and did not take the call"))
	}
	return nil
}

func (cc *clientConn) onHeaders(h frameHeader) error {
	fields, tooLarge, buf, err := cc.hb.read(cc.br, h, cc.scratch)
	cc.scratch = buf[:0]
	if err != nil {
		return err
	}
	st := cc.stream(h.stream)
	if st == nil {
		return nil
	}
	if tooLarge {
		cc.abort(st, status.New(codes.Internal, "h2grpc: response header list too large"))
		return nil
	}
	var httpStatus, contentType, grpcStatus, grpcMessage string
	for _, f := range fields {
		switch f.Name {
		case ":status":
			httpStatus = f.Value
		case "content-type":
			contentType = f.Value
		case "grpc-status":
			grpcStatus = f.Value
		case "grpc-message":
			grpcMessage = grpcMessageDecode(f.Value)
		}
	}
	first := !st.gotHeaders
	st.gotHeaders = true
	if first {
		if httpStatus != "200" {
			cc.abort(st, httpStatusError(httpStatus, grpcStatus, grpcMessage))
			return nil
		}
		if !isGRPCContentType(contentType) {
			cc.abort(st, status.Newf(codes.Unknown, "h2grpc: response content-type %q is not gRPC", contentType))
			return nil
		}
	}
	if !h.has(http2.FlagHeadersEndStream) {
		if !first {
			cc.abort(st, status.New(codes.Internal, "h2grpc: trailers without END_STREAM"))
		}
		return nil
	}
	code, err := strconv.ParseUint(grpcStatus, 10, 32)
	switch {
	case err != nil:
		cc.end(st, status.Newf(codes.Internal, "h2grpc: malformed grpc-status %q", grpcStatus))
	case st.in.partial():
		cc.end(st, status.New(codes.Internal, "h2grpc: the server ended the call inside a message"))
	default:
		cc.end(st, status.New(codes.Code(code), grpcMessage))
	}
	return nil
}

// httpStatusError maps a non-200 HTTP status to a gRPC status, as gRPC's
// HTTP/2 mapping does.
func httpStatusError(httpStatus, grpcStatus, msg string) *status.Status {
	if code, err := strconv.ParseUint(grpcStatus, 10, 32); err == nil {
		return status.New(codes.Code(code), msg)
	}
	c := codes.Unknown
	switch httpStatus {
	case "400":
		c = codes.Internal
	case "401":
		c = codes.Unauthenticated
	case "403":
		c = codes.PermissionDenied
	case "404":
		c = codes.Unimplemented
	case "429", "502", "503", "504":
		c = codes.Unavailable
	}
	return status.Newf(c, "h2grpc: unexpected HTTP status %s", httpStatus)
}

func (cc *clientConn) onData(h frameHeader) error {
	n, pad, err := cc.dataHeader(h)
	if err != nil {
		return err
	}
	st := cc.stream(h.stream)
	if st == nil || !st.gotHeaders {
		if _, err := cc.br.Discard(n + pad); err != nil {
			return err
		}
		if st != nil {
			cc.abort(st, status.New(codes.Internal, "h2grpc: DATA before the response headers"))
		}
		return cc.taken(nil, int64(h.length))
	}
	if err := cc.receive(st, n); err != nil {
		return err
	}
	if _, err := cc.br.Discard(pad); err != nil {
		return err
	}
	return cc.taken(st, int64(h.length))
}

// receive reads n bytes of a response into st's message.
func (cc *clientConn) receive(st *clientStream, n int) error {
	open := func(compressed bool, size int) Sink {
		var bad *status.Status
		switch {
		case compressed:
			bad = status.New(codes.Internal, "h2grpc: compressed response, but no compression was offered")
		case size > cc.opts.MaxMessageBytes:
			bad = status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, cc.opts.MaxMessageBytes)
		case st.msg != nil:
			bad = status.New(codes.Internal, "h2grpc: more than one response message to a unary call")
		}
		if bad != nil {
			cc.abort(st, bad)
			return failedSink{bad.Err()}
		}
		return &bytesSink{size: size}
	}
	return st.in.receive(cc.br, n, open, func(s Sink) {
		if b, ok := s.(*bytesSink); ok {
			st.msg = b
		}
	}, nil)
}

// taken gives back window for n bytes read, on the connection and, if st
// is still open, on its stream, once a quarter of a window is due.
func (cc *clientConn) taken(st *clientStream, n int64) error {
	b := cc.conn.taken(nil, n)
	if st != nil {
		if st.unacked += n; st.unacked >= int64(cc.opts.StreamWindow)/4 {
			b = appendWindowUpdate(b, st.id, uint32(st.unacked))
			st.unacked = 0
		}
	}
	if b == nil {
		return nil
	}
	return cc.write(b)
}

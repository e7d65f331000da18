package h2grpc

import (
	"bufio"
	"context"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// serverStream is one call. The connection's reader fills its messages;
// its handler takes them (RecvMsg) and answers (SendMsg, then the status).
type serverStream struct {
	c      *serverConn
	id     uint32
	method string
	ctx    context.Context
	cancel context.CancelFunc

	in inbound // owned by the reader goroutine

	rmu        sync.Mutex
	ready      []Sink // received messages the handler has not taken
	eof        bool   // the client has sent its last message
	gone       bool   // the stream has ended: nothing more will be taken
	notify     chan struct{}
	recvWindow int64 // bytes the client may still send on the stream
	unacked    int64

	sendWindow int64       // guarded by c.mu
	counted    bool        // guarded by c.mu: counted in c.calls
	returned   atomic.Bool // its handler has returned

	smu         sync.Mutex // send side
	headersSent bool
	endSent     bool
	reset       atomic.Bool // RST_STREAM sent or received: nothing more is written
}

func (c *serverConn) newStream(id uint32, method string, endStream bool) *serverStream {
	c.mu.Lock()
	window := int64(c.peer.window)
	c.mu.Unlock()
	return &serverStream{c: c, id: id, method: method, notify: make(chan struct{}, 1),
		recvWindow: int64(c.s.opts.StreamWindow), sendWindow: window, eof: endStream}
}

// run calls the method's handler and sends its answer and status.
func (st *serverStream) run(m method) {
	defer st.uncount()
	defer st.cancel()
	var err error
	if m.unary != nil {
		var resp any
		resp, err = m.unary(m.impl, st.ctx, st.recvUnary, nil)
		st.returned.Store(true)
		if err == nil {
			// The answer and an OK status leave in one write.
			if err = st.sendMsg(resp, true); err == nil {
				return
			}
		}
	} else {
		err = m.stream.Handler(m.impl, st)
		st.returned.Store(true)
	}
	st.finish(status.Convert(err))
}

// uncount stops counting st against MaxStreams, once.
func (st *serverStream) uncount() {
	st.c.mu.Lock()
	st.uncountLocked()
	st.c.mu.Unlock()
}

// uncountLocked is uncount with c.mu held.
func (st *serverStream) uncountLocked() {
	if st.counted {
		st.counted = false
		st.c.calls--
		st.c.reportIdle(st.c.calls == 0, true)
		st.c.touch()
	}
}

func (st *serverStream) recvUnary(m any) error {
	err := st.RecvMsg(m)
	if err == io.EOF {
		return status.Error(codes.Internal, "h2grpc: unary call ended without a request message")
	}
	return err
}

// admit counts a DATA frame of n bytes against the stream's window.
func (st *serverStream) admit(n int64) bool {
	st.rmu.Lock()
	defer st.rmu.Unlock()
	st.recvWindow -= n
	return st.recvWindow >= 0
}

// receive reads n bytes of a DATA frame from r into the stream's messages.
func (st *serverStream) receive(r *bufio.Reader, n int) error {
	return st.in.receive(r, n, st.open, st.complete, st.failNow)
}

// failNow answers the call with a message's error as soon as its sink
// returns it (a request over a declared bound), instead of once the rest of
// the message has arrived. (In a goroutine: the handler may hold the send
// side while it waits for a window only the reader can grow.)
func (st *serverStream) failNow(err error) { go st.finish(status.Convert(err)) }

// open picks the sink of a message of size bytes.
func (st *serverStream) open(compressed bool, size int) Sink {
	opts := &st.c.s.opts
	switch {
	case compressed:
		return failedSink{status.Error(codes.Unimplemented, "h2grpc: compressed messages are not supported (no grpc-encoding is)")}
	case size > opts.MaxMessageBytes:
		// Fail now rather than read a message that will be refused: the
		// client stops sending. (In a goroutine: the handler may hold the
		// send side while it waits for a window only this reader can grow.)
		s := status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, opts.MaxMessageBytes)
		go st.finish(s)
		return failedSink{s.Err()}
	}
	if opts.Sink != nil {
		if k := opts.Sink(st.method, size); k != nil {
			return k
		}
	}
	return &bytesSink{size: size}
}

// statusOf keeps a status error and makes any other error an Internal one.
func statusOf(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
}

// complete hands a message received whole to the handler.
func (st *serverStream) complete(s Sink) {
	st.rmu.Lock()
	if st.gone {
		st.rmu.Unlock()
		s.Release()
		return
	}
	st.ready = append(st.ready, s)
	st.rmu.Unlock()
	st.wake()
}

func (st *serverStream) wake() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// taken accounts n bytes of the stream's window as read; the window is given
// back while no received message waits for the handler, so that a handler
// that takes nothing holds up at most a window of the client's bytes.
func (st *serverStream) taken(n int64) {
	st.rmu.Lock()
	st.unacked += n
	b := st.windowUpdateLocked()
	st.rmu.Unlock()
	if b != nil {
		st.c.write(b)
	}
}

func (st *serverStream) windowUpdateLocked() []byte {
	if len(st.ready) > 0 || st.gone || st.eof || st.unacked < int64(st.c.s.opts.StreamWindow)/4 {
		return nil
	}
	b := appendWindowUpdate(nil, st.id, uint32(st.unacked))
	st.recvWindow += st.unacked
	st.unacked = 0
	return b
}

// endRecv notes the client's END_STREAM.
func (st *serverStream) endRecv() {
	if st.in.partial() {
		st.in.release()
		st.in = inbound{}
		st.complete(failedSink{status.Error(codes.Internal, "h2grpc: the client ended the call inside a message")})
	}
	st.rmu.Lock()
	st.eof = true
	st.rmu.Unlock()
	st.wake()
}

// ended reports whether the client has ended its side.
func (st *serverStream) ended() bool {
	st.rmu.Lock()
	defer st.rmu.Unlock()
	return st.eof
}

// resetRecv ends the receiving side for good: the handler's context is
// cancelled and messages not taken are released.
func (st *serverStream) resetRecv() {
	if st.cancel != nil {
		st.cancel()
	}
	st.rmu.Lock()
	st.gone = true
	ready := st.ready
	st.ready = nil
	st.rmu.Unlock()
	for _, s := range ready {
		s.Release()
	}
	st.wake()
}

// RecvMsg waits for the next message and decodes it into m; io.EOF once
// the client has sent its last.
func (st *serverStream) RecvMsg(m any) error {
	for {
		st.rmu.Lock()
		if len(st.ready) > 0 {
			s := st.ready[0]
			st.ready[0] = nil
			st.ready = st.ready[1:]
			b := st.windowUpdateLocked()
			st.rmu.Unlock()
			if b != nil {
				st.c.write(b)
			}
			if err := s.Decode(m); err != nil {
				return statusOf(err)
			}
			return nil
		}
		eof, gone := st.eof, st.gone
		st.rmu.Unlock()
		if gone {
			return status.FromContextError(context.Canceled).Err()
		}
		if eof {
			return io.EOF
		}
		select {
		case <-st.notify:
		case <-st.ctx.Done():
			return status.FromContextError(st.ctx.Err()).Err()
		}
	}
}

// SendMsg marshals m and sends it, with the response headers first.
func (st *serverStream) SendMsg(m any) error { return st.sendMsg(m, false) }

// sendMsg sends m, and with last an OK status after it, ending the call.
func (st *serverStream) sendMsg(m any, last bool) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "h2grpc: %T is not a protobuf message", m)
	}
	b, err := proto.Marshal(pm)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	if max := st.c.s.opts.MaxMessageBytes; len(b) > max {
		return status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", len(b), max)
	}
	return st.send(last, messagePrefix(len(b)), b)
}

// errStreamEnded is a send's error on a stream that has ended.
var errStreamEnded = status.Error(codes.Canceled, "h2grpc: the call has ended")

// send writes the message made of parts as DATA frames, as the client's
// windows allow, and with last an OK status after it.
func (st *serverStream) send(last bool, parts ...[]byte) error {
	st.smu.Lock()
	defer st.smu.Unlock()
	left := 0
	for _, p := range parts {
		left += len(p)
	}
	for left > 0 {
		if st.endSent {
			return errStreamEnded
		}
		n, maxFrame, err := st.c.reserve(st, left)
		if err != nil {
			return err
		}
		c := st.c
		c.wmu.Lock()
		b := c.wbuf[:0]
		if !st.headersSent {
			b = c.hw.appendBlock(b, st.id, false, maxFrame, ":status", "200", "content-type", "application/grpc")
			st.headersSent = true
		}
		var trailer []byte
		if last && n == left {
			trailer = st.endLocked(c.hw.appendBlock(nil, st.id, true, maxFrame, "grpc-status", "0"))
		}
		parts, err = c.writeDataLocked(b, parts, n, maxFrame, st.id, false, trailer)
		c.wmu.Unlock()
		c.answered.Store(true)
		if err != nil {
			return status.Errorf(codes.Unavailable, "h2grpc: %v", err)
		}
		left -= n
	}
	if last {
		st.c.endStream(st)
	}
	return nil
}

// appendData puts the first n bytes of parts in DATA frames of at most
// maxFrame bytes: the first frame's header is appended to b, and bufs gets
// its payload, then each other frame's header and payload, as slices of
// parts (nothing is copied). It returns b, bufs and the parts left.
func appendData(b []byte, bufs, parts [][]byte, n, maxFrame int, stream uint32, endStream bool) ([]byte, [][]byte, [][]byte) {
	// Later headers share one array sized for all of them, so that the
	// slices taken of it stay valid.
	arena := make([]byte, 0, headerLen*max(0, (n+maxFrame-1)/maxFrame-1))
	for first := true; n > 0; first = false {
		size := min(n, maxFrame)
		n -= size
		flags := http2.Flags(0)
		if n == 0 && endStream {
			flags = http2.FlagDataEndStream
		}
		if first {
			b = appendFrameHeader(b, size, http2.FrameData, flags, stream)
		} else {
			start := len(arena)
			arena = appendFrameHeader(arena, size, http2.FrameData, flags, stream)
			bufs = append(bufs, arena[start:])
		}
		for size > 0 {
			k := min(size, len(parts[0]))
			bufs = append(bufs, parts[0][:k])
			size -= k
			if parts[0] = parts[0][k:]; len(parts[0]) == 0 {
				parts = parts[1:]
			}
		}
	}
	return b, bufs, parts
}

// reserve waits until st and its connection have send window and takes up
// to want bytes of both; it also returns the client's frame size.
func (c *serverConn) reserve(st *serverStream, want int) (int, uint32, error) {
	return c.conn.reserve(&st.sendWindow, want, func() error {
		switch {
		case c.closed:
			return status.Error(codes.Unavailable, "h2grpc: connection closed")
		case c.streams[st.id] != st:
			return errStreamEnded
		case st.ctx.Err() != nil:
			return status.FromContextError(st.ctx.Err()).Err()
		}
		return nil
	})
}

// finish sends the call's status (trailers, or a trailers-only answer if
// nothing was sent) and ends the stream.
func (st *serverStream) finish(s *status.Status) {
	st.close(func() []string {
		fields := make([]string, 0, 8)
		if !st.headersSent {
			fields = append(fields, ":status", "200", "content-type", "application/grpc")
		}
		fields = append(fields, "grpc-status", strconv.Itoa(int(s.Code())))
		if msg := s.Message(); msg != "" {
			fields = append(fields, "grpc-message", grpcMessageEncode(msg))
		}
		return fields
	})
}

// close writes the stream's closing HEADERS, with the fields that fields
// returns under the send lock, unless its end was sent or it was reset, and
// ends the stream.
func (st *serverStream) close(fields func() []string) {
	c := st.c
	st.smu.Lock()
	if !st.endSent && !st.reset.Load() {
		maxFrame := c.maxFrame()
		c.wmu.Lock()
		b := st.endLocked(c.hw.appendBlock(c.wbuf[:0], st.id, true, maxFrame, fields()...))
		c.writeLocked(b)
		c.wbuf = b
		c.wmu.Unlock()
		c.answered.Store(true)
	}
	st.endSent = true
	st.smu.Unlock()
	c.endStream(st)
}

// endLocked marks the send side ended; b holds the closing HEADERS, to
// which it adds RST_STREAM(NO_ERROR) if the client has not ended its side:
// the answer is complete, the client need send nothing more.
func (st *serverStream) endLocked(b []byte) []byte {
	st.endSent = true
	st.c.mu.Lock()
	// A call whose answer is being written counts no more: its client may
	// open the next as soon as it reads the answer.
	if st.returned.Load() {
		st.uncountLocked()
	}
	st.c.mu.Unlock()
	if !st.ended() {
		b = appendRST(b, st.id, http2.ErrCodeNo)
	}
	return b
}

// refuse answers a call that will not run with s (trailers only).
func (st *serverStream) refuse(s *status.Status) error {
	st.finish(s)
	return nil
}

// refuseHTTP answers a request that is not a gRPC call with an HTTP status.
func (st *serverStream) refuseHTTP(code int) error {
	st.close(func() []string { return []string{":status", strconv.Itoa(code), "content-type", "text/plain"} })
	return nil
}

// Context is the call's context: cancelled when the call ends, the client
// resets it, its deadline passes or the connection closes.
func (st *serverStream) Context() context.Context { return st.ctx }

// SetHeader, SendHeader and SetTrailer are accepted and ignored: no
// handler served here sends metadata.
func (st *serverStream) SetHeader(metadata.MD) error  { return nil }
func (st *serverStream) SendHeader(metadata.MD) error { return nil }
func (st *serverStream) SetTrailer(metadata.MD)       {}

var _ grpc.ServerStream = (*serverStream)(nil)

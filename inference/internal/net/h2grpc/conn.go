package h2grpc

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// conn is what both ends of a connection share: the socket, the write side
// and its header encoder, the peer's settings and the flow-control windows.
// The server's and the client's connections embed it.
type conn struct {
	nc           net.Conn
	br           *bufio.Reader
	writeTimeout time.Duration

	wmu  sync.Mutex // serialises writes and header encoding
	hw   *headerWriter
	wbuf []byte

	mu         sync.Mutex
	cond       *sync.Cond // signalled when a send window grows or a stream ends
	peer       peerSettings
	sendWindow int64 // connection-level window for what we send
	// windows calls yield with each open stream's send window, and
	// window returns stream id's (nil if it is not open); mu is held.
	windows func(yield func(*int64))
	window  func(id uint32) *int64

	// Owned by the reader goroutine.
	recvWindow int64 // bytes the peer may still send on the connection
	unacked    int64 // bytes read and not yet given back with WINDOW_UPDATE
	connWindow int64
	hb         *headerBlock
	scratch    []byte
	hdr        [headerLen]byte
}

// streamWindows makes conn's windows and window over a connection's map of
// open streams (the map may be replaced; streams is where it is kept) and
// each stream's send window.
func streamWindows[S any](streams *map[uint32]S, w func(S) *int64) (func(yield func(*int64)), func(uint32) *int64) {
	each := func(yield func(*int64)) {
		for _, st := range *streams {
			yield(w(st))
		}
	}
	one := func(id uint32) *int64 {
		if st, ok := (*streams)[id]; ok {
			return w(st)
		}
		return nil
	}
	return each, one
}

// init sets up c over nc, with a receive window of connWindow and decoded
// header lists of at most headerLimit bytes.
func (c *conn) init(nc net.Conn, connWindow int64, headerLimit int, writeTimeout time.Duration) {
	c.nc, c.br, c.writeTimeout = nc, bufio.NewReaderSize(nc, 64<<10), writeTimeout
	c.hw, c.peer, c.sendWindow = newHeaderWriter(), defaultPeerSettings(), defaultWindow
	c.cond = sync.NewCond(&c.mu)
	c.connWindow, c.recvWindow = connWindow, connWindow
	c.hb = newHeaderBlock(headerLimit)
}

// hello is the SETTINGS frame that opens our side, then a WINDOW_UPDATE
// that raises the connection's receive window to connWindow.
func (c *conn) hello(b []byte, s ...setting) []byte {
	b = appendSettings(b, s...)
	return appendWindowUpdate(b, 0, uint32(c.connWindow-defaultWindow))
}

// write writes b, and then bufs, under the write lock (writeFrames).
func (c *conn) write(b []byte, bufs ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(b, bufs...)
}

func (c *conn) writeLocked(b []byte, bufs ...[]byte) error {
	return writeFrames(c.nc, c.writeTimeout, b, bufs...)
}

func (c *conn) onSettings(h frameHeader) error {
	if h.stream != 0 {
		return protocolError("SETTINGS on stream %d", h.stream)
	}
	if h.has(http2.FlagSettingsAck) {
		if h.length != 0 {
			return connError{http2.ErrCodeFrameSize, "SETTINGS ACK with a payload"}
		}
		return nil
	}
	if h.length > 6*64 {
		return connError{http2.ErrCodeEnhanceYourCalm, "SETTINGS of more than 64 parameters"}
	}
	payload := make([]byte, h.length)
	if _, err := io.ReadFull(c.br, payload); err != nil {
		return err
	}
	c.mu.Lock()
	delta, err := c.peer.apply(payload)
	if err == nil {
		c.windows(func(w *int64) { *w += delta })
		c.cond.Broadcast()
	}
	table := c.peer.tableSize
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.wmu.Lock()
	c.hw.enc.SetMaxDynamicTableSizeLimit(table)
	c.wmu.Unlock()
	return c.write(appendFrameHeader(nil, 0, http2.FrameSettings, http2.FlagSettingsAck, 0))
}

// onWindowUpdate grows the window a WINDOW_UPDATE names. An update of a
// stream by 0 (PROTOCOL_ERROR, on any stream, as x/net's framer reads it)
// or past 2^31-1 (FLOW_CONTROL_ERROR) is that stream's error: code says
// which, 0 if none.
func (c *conn) onWindowUpdate(h frameHeader) (code http2.ErrCode, err error) {
	if h.length != 4 {
		return 0, connError{http2.ErrCodeFrameSize, "malformed WINDOW_UPDATE"}
	}
	var b [4]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		return 0, err
	}
	n := int64(binary.BigEndian.Uint32(b[:]) & maxWindow)
	if n == 0 {
		if h.stream == 0 {
			return 0, protocolError("connection WINDOW_UPDATE of 0")
		}
		return http2.ErrCodeProtocol, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.cond.Broadcast()
	if h.stream == 0 {
		if c.sendWindow += n; c.sendWindow > maxWindow {
			return 0, connError{http2.ErrCodeFlowControl, "connection WINDOW_UPDATE past 2^31-1"}
		}
		return 0, nil
	}
	if w := c.window(h.stream); w != nil {
		if *w += n; *w > maxWindow {
			return http2.ErrCodeFlowControl, nil
		}
	}
	return 0, nil
}

// onPing answers a PING.
func (c *conn) onPing(h frameHeader) error {
	if h.length != 8 || h.stream != 0 {
		return connError{http2.ErrCodeFrameSize, "malformed PING"}
	}
	var data [8]byte
	if _, err := io.ReadFull(c.br, data[:]); err != nil {
		return err
	}
	if h.has(http2.FlagPingAck) {
		return nil
	}
	return c.write(append(appendFrameHeader(nil, 8, http2.FramePing, http2.FlagPingAck, 0), data[:]...))
}

// dataHeader reads a DATA frame's pad length, if any, and counts the frame
// against the connection's receive window; it returns the data's length and
// the padding's.
func (c *conn) dataHeader(h frameHeader) (n, pad int, err error) {
	n = int(h.length)
	if h.has(http2.FlagDataPadded) {
		p, err := c.br.ReadByte()
		if err != nil {
			return 0, 0, err
		}
		pad = int(p)
		if n -= 1 + pad; n < 0 {
			return 0, 0, protocolError("DATA padding longer than the frame")
		}
	}
	if c.recvWindow -= int64(h.length); c.recvWindow < 0 {
		return 0, 0, connError{http2.ErrCodeFlowControl, "DATA beyond the connection's window"}
	}
	return n, pad, nil
}

// taken appends to b a WINDOW_UPDATE that gives the peer back n bytes of
// connection window, once a quarter of the window is due.
func (c *conn) taken(b []byte, n int64) []byte {
	if c.unacked += n; c.unacked < c.connWindow/4 {
		return b
	}
	b = appendWindowUpdate(b, 0, uint32(c.unacked))
	c.recvWindow += c.unacked
	c.unacked = 0
	return b
}

// reserve waits until the connection and a stream's window w both have
// send window and takes up to want bytes of both; stop, called with mu held
// before each wait, ends the wait with its error. It also returns the
// peer's largest frame.
func (c *conn) reserve(w *int64, want int, stop func() error) (int, uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if err := stop(); err != nil {
			return 0, 0, err
		}
		if n, ok := c.reserveLocked(w, want); ok {
			return n, c.peer.maxFrame, nil
		}
		c.cond.Wait()
	}
}

// reserveLocked takes up to want bytes of send window from the connection
// and from a stream's window w, if both have some; mu is held.
func (c *conn) reserveLocked(w *int64, want int) (int, bool) {
	if c.sendWindow <= 0 || *w <= 0 {
		return 0, false
	}
	n := int(min(int64(want), c.sendWindow, *w))
	c.sendWindow -= int64(n)
	*w -= int64(n)
	return n, true
}

// maxFrame is the largest frame the peer takes.
func (c *conn) maxFrame() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peer.maxFrame
}

// writeDataLocked writes b (frames already built, or nothing), then the
// first n bytes of parts in DATA frames of stream id (the last with
// END_STREAM if end), then tail; wmu is held. It returns the parts left.
func (c *conn) writeDataLocked(b []byte, parts [][]byte, n int, maxFrame, id uint32, end bool, tail []byte) ([][]byte, error) {
	var bufs [][]byte
	b, bufs, parts = appendData(b, nil, parts, n, int(maxFrame), id, end)
	if tail != nil {
		bufs = append(bufs, tail)
	}
	err := c.writeLocked(b, bufs...)
	c.wbuf = b
	return parts, err
}

// messagePrefix is the 5-byte prefix of an uncompressed message of size
// bytes.
func messagePrefix(size int) []byte {
	return binary.BigEndian.AppendUint32([]byte{0}, uint32(size))
}

// inbound gathers a stream's messages from its DATA frames: each
// message's 5-byte prefix (compressed flag, length), then its bytes, read
// from the socket into the memory of the Sink that open picks for it.
type inbound struct {
	pre  [5]byte
	npre int
	cur  Sink // the message being received; nil between messages
	left int  // its bytes still to come
}

// receive reads n bytes of DATA from r. At each message's prefix, open
// picks its sink (a failedSink drops its bytes); done gets each message
// once all its bytes are in; fail, if not nil, gets a sink's error as soon
// as Filled returns it (the rest of the message is dropped as it arrives).
func (in *inbound) receive(r *bufio.Reader, n int, open func(compressed bool, size int) Sink, done func(Sink), fail func(error)) error {
	for n > 0 {
		if in.cur == nil {
			k := min(5-in.npre, n)
			if _, err := io.ReadFull(r, in.pre[in.npre:in.npre+k]); err != nil {
				return err
			}
			n -= k
			if in.npre += k; in.npre < 5 {
				continue
			}
			in.npre = 0
			in.left = int(binary.BigEndian.Uint32(in.pre[1:]))
			in.cur = open(in.pre[0] != 0, in.left)
		} else {
			k := min(n, in.left)
			n -= k
			in.left -= k
			for k > 0 {
				buf := in.cur.Buffer(k) // none from a failedSink: dropped
				if len(buf) == 0 {
					if _, err := r.Discard(k); err != nil {
						return err
					}
					break
				}
				if _, err := io.ReadFull(r, buf); err != nil {
					return err
				}
				k -= len(buf)
				if err := in.cur.Filled(len(buf)); err != nil {
					in.cur.Release()
					err = statusOf(err)
					in.cur = failedSink{err}
					if fail != nil {
						fail(err)
					}
				}
			}
		}
		if in.left == 0 {
			s := in.cur
			in.cur = nil
			done(s)
		}
	}
	return nil
}

// partial reports whether a message has begun and not ended.
func (in *inbound) partial() bool { return in.cur != nil || in.npre != 0 }

// release releases the message being received, if any.
func (in *inbound) release() {
	if in.cur != nil {
		in.cur.Release()
		in.cur = nil
	}
}

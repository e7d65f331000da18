package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// atomicInt is a counter safe for concurrent use.
type atomicInt struct{ v atomic.Int64 }

func (a *atomicInt) add(n int64) { a.v.Add(n) }
func (a *atomicInt) load() int64 { return a.v.Load() }

// h2conn is a raw HTTP/2 client connection with prior knowledge, as gRPC
// clients connect: it writes whatever frames an attack needs, honours the
// server's flow-control windows for DATA, and records what the server sent.
type h2conn struct {
	c    net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex // guards fr's writes and enc
	enc  *hpack.Encoder
	hbuf bytes.Buffer
	sent atomicInt

	mu       sync.Mutex
	cond     *sync.Cond
	settings bool  // the server's first SETTINGS arrived
	maxFrame int   // the server's SETTINGS_MAX_FRAME_SIZE
	connWin  int64 // what the connection may still send
	initWin  int64 // the server's SETTINGS_INITIAL_WINDOW_SIZE
	streams  map[uint32]int64
	goaway   *http2.GoAwayFrame
	resets   map[uint32]http2.ErrCode
	ended    map[uint32]bool // streams the server ended (trailers or RST)
	readErr  error
	closedAt time.Time
}

// dialH2 connects to addr, sends the preface and SETTINGS, and waits for the
// server's SETTINGS.
func dialH2(addr string) (*h2conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	// No attack holds a connection longer; a write the server never reads
	// fails then instead of blocking.
	_ = c.SetDeadline(time.Now().Add(90 * time.Second))
	h := &h2conn{c: c, maxFrame: 16384, connWin: 65535, initWin: 65535,
		streams: map[uint32]int64{}, resets: map[uint32]http2.ErrCode{}, ended: map[uint32]bool{}}
	h.cond = sync.NewCond(&h.mu)
	h.fr = http2.NewFramer(countWriter{c, &h.sent}, c)
	h.fr.SetMaxReadFrameSize(1 << 24)
	h.enc = hpack.NewEncoder(&h.hbuf)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		c.Close()
		return nil, err
	}
	h.sent.add(int64(len(http2.ClientPreface)))
	if err := h.fr.WriteSettings(); err != nil {
		c.Close()
		return nil, err
	}
	go h.read()
	deadline := time.AfterFunc(5*time.Second, func() { h.mu.Lock(); h.cond.Broadcast(); h.mu.Unlock() })
	defer deadline.Stop()
	t0 := time.Now()
	h.mu.Lock()
	for !h.settings && h.readErr == nil && time.Since(t0) < 5*time.Second {
		h.cond.Wait()
	}
	ok, rerr := h.settings, h.readErr
	h.mu.Unlock()
	if !ok {
		c.Close()
		return nil, fmt.Errorf("no SETTINGS from the server: %v", rerr)
	}
	return h, nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w interface{ Write([]byte) (int, error) }
	n *atomicInt
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.add(int64(n))
	return n, err
}

// read handles the server's frames until the connection ends.
func (h *h2conn) read() {
	for {
		f, err := h.fr.ReadFrame()
		h.mu.Lock()
		if err != nil {
			h.readErr = err
			h.closedAt = time.Now()
			h.cond.Broadcast()
			h.mu.Unlock()
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = f.ForeachSetting(func(s http2.Setting) error {
					switch s.ID {
					case http2.SettingMaxFrameSize:
						h.maxFrame = int(s.Val)
					case http2.SettingInitialWindowSize:
						d := int64(s.Val) - h.initWin
						h.initWin = int64(s.Val)
						for id := range h.streams {
							h.streams[id] += d
						}
					}
					return nil
				})
				h.settings = true
				h.mu.Unlock()
				h.wmu.Lock()
				_ = h.fr.WriteSettingsAck()
				h.wmu.Unlock()
				h.mu.Lock()
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				h.connWin += int64(f.Increment)
			} else if _, ok := h.streams[f.StreamID]; ok {
				h.streams[f.StreamID] += int64(f.Increment)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.mu.Unlock()
				h.wmu.Lock()
				_ = h.fr.WritePing(true, f.Data)
				h.wmu.Unlock()
				h.mu.Lock()
			}
		case *http2.GoAwayFrame:
			g := *f
			h.goaway = &g
		case *http2.RSTStreamFrame:
			h.resets[f.StreamID] = f.ErrCode
			h.ended[f.StreamID] = true
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				h.ended[f.StreamID] = true
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				// Give the window back at once, so the server is never
				// blocked on us.
				h.mu.Unlock()
				h.wmu.Lock()
				_ = h.fr.WriteWindowUpdate(0, uint32(n))
				_ = h.fr.WriteWindowUpdate(f.StreamID, uint32(n))
				h.wmu.Unlock()
				h.mu.Lock()
			}
			if f.StreamEnded() {
				h.ended[f.StreamID] = true
			}
		}
		h.cond.Broadcast()
		h.mu.Unlock()
	}
}

// headers encodes a gRPC call's request headers for path.
func (h *h2conn) grpcHeaders(path string) []byte {
	h.hbuf.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "attack"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = h.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	return append([]byte(nil), h.hbuf.Bytes()...)
}

// open sends HEADERS for a new stream id with the block; endHeaders false
// leaves the block open for CONTINUATION frames.
func (h *h2conn) open(id uint32, block []byte, endHeaders, endStream bool) error {
	h.mu.Lock()
	h.streams[id] = h.initWin
	h.mu.Unlock()
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: endHeaders, EndStream: endStream})
}

// data sends p on stream id in frames the server accepts, waiting for
// flow-control window; it gives up after timeout.
func (h *h2conn) data(id uint32, p []byte, end bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	wake := time.AfterFunc(timeout, func() { h.mu.Lock(); h.cond.Broadcast(); h.mu.Unlock() })
	defer wake.Stop()
	for len(p) > 0 || end {
		h.mu.Lock()
		for h.readErr == nil && h.goaway == nil && !h.ended[id] && (h.connWin <= 0 || h.streams[id] <= 0) && len(p) > 0 {
			if time.Now().After(deadline) {
				h.mu.Unlock()
				return errors.New("flow-control window closed until the deadline")
			}
			h.cond.Wait()
		}
		if h.readErr != nil || h.goaway != nil || h.ended[id] {
			err := fmt.Errorf("server ended the stream or connection (goaway %v, read %v)", h.goaway != nil, h.readErr)
			h.mu.Unlock()
			return err
		}
		n := min(len(p), h.maxFrame, int(min(h.connWin, h.streams[id])))
		h.connWin -= int64(n)
		h.streams[id] -= int64(n)
		h.mu.Unlock()
		last := end && n == len(p)
		h.wmu.Lock()
		err := h.fr.WriteData(id, last, p[:n])
		h.wmu.Unlock()
		if err != nil {
			return err
		}
		p = p[n:]
		if last {
			return nil
		}
	}
	return nil
}

// continuation sends an empty CONTINUATION frame on stream id.
func (h *h2conn) continuation(id uint32) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return h.fr.WriteContinuation(id, false, nil)
}

// ping sends a PING.
func (h *h2conn) ping() error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return h.fr.WritePing(false, [8]byte{1})
}

// waitGoAway waits up to d for a GOAWAY or the end of the connection.
func (h *h2conn) waitGoAway(d time.Duration) (*http2.GoAwayFrame, error) {
	wake := time.AfterFunc(d, func() { h.mu.Lock(); h.cond.Broadcast(); h.mu.Unlock() })
	defer wake.Stop()
	t0 := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.goaway == nil && h.readErr == nil && time.Since(t0) < d {
		h.cond.Wait()
	}
	return h.goaway, h.readErr
}

func (h *h2conn) close() { h.c.Close() }

// grpcMessage frames a protobuf message as gRPC does: no compression, a
// 4-byte big-endian length that may claim more than msg holds.
func grpcMessage(claim uint32, msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(out[1:], claim)
	return append(out, msg...)
}

// pbField appends a length-delimited protobuf field with a length that
// may claim more than value holds.
func pbField(b []byte, field int, claim uint64, value []byte) []byte {
	b = binary.AppendUvarint(b, uint64(field)<<3|2)
	b = binary.AppendUvarint(b, claim)
	return append(b, value...)
}

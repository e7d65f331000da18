package h2grpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/inferbench/inferbench/inference/internal/net/writev"
)

// preface is what a client sends before its first frame (RFC 9113, 3.4).
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

const (
	headerLen = 9
	// defaultWindow is every flow-control window before SETTINGS or
	// WINDOW_UPDATE change it, and defaultFrame the largest frame a peer
	// accepts before it says otherwise.
	defaultWindow = 65535
	defaultFrame  = 16384
	// maxFrame is the largest frame this package's servers and clients
	// accept (SETTINGS_MAX_FRAME_SIZE): a tensor arrives in few frames.
	// It is half of what HTTP/2 allows, so that a peer can still send a
	// frame one byte over it, which is answered FRAME_SIZE_ERROR.
	maxFrame = 1 << 23
	// maxHeaderFrame is the largest HEADERS or CONTINUATION frame taken
	// (FRAME_SIZE_ERROR beyond), whatever SETTINGS_MAX_FRAME_SIZE says: a
	// gRPC header block is small, clients split it at 16 KiB (grpc-go) or
	// well below, and a header block costs CPU to gather and decode.
	maxHeaderFrame = defaultFrame
	// maxHeaderBlockFrames bounds the frames of one header block: a HEADERS
	// frame and its CONTINUATION frames. Empty CONTINUATION frames cost a
	// frame header each and carry nothing; more than this is a connection
	// error (ENHANCE_YOUR_CALM).
	maxHeaderBlockFrames = 32
	// maxWindow is the largest flow-control window HTTP/2 allows.
	maxWindow = 1<<31 - 1
)

// frameHeader is a frame's 9-byte header.
type frameHeader struct {
	length uint32
	typ    http2.FrameType
	flags  http2.Flags
	stream uint32
}

func (h frameHeader) has(f http2.Flags) bool { return h.flags&f != 0 }

func readFrameHeader(r io.Reader, buf *[headerLen]byte) (frameHeader, error) {
	if _, err := io.ReadFull(r, buf[:]); err != nil {
		return frameHeader{}, err
	}
	return frameHeader{
		length: uint32(buf[0])<<16 | uint32(buf[1])<<8 | uint32(buf[2]),
		typ:    http2.FrameType(buf[3]),
		flags:  http2.Flags(buf[4]),
		stream: binary.BigEndian.Uint32(buf[5:]) & (1<<31 - 1),
	}, nil
}

func appendFrameHeader(b []byte, length int, typ http2.FrameType, flags http2.Flags, stream uint32) []byte {
	return append(b, byte(length>>16), byte(length>>8), byte(length), byte(typ), byte(flags),
		byte(stream>>24), byte(stream>>16), byte(stream>>8), byte(stream))
}

// writeFrames writes b, then bufs, to nc with writev (writev.To) where it
// can, within timeout; a failed write closes nc (a connection that cannot be written is
// no use: its reader sees the close and ends every call).
//
// Under the race detector the bytes are joined and written with one write:
// the detector takes a socket's write and read as synchronising (package
// syscall marks them) but not writev, so a request written by writev and
// the memory its answer says is ready would look unsynchronised.
func writeFrames(nc net.Conn, timeout time.Duration, b []byte, bufs ...[]byte) error {
	nc.SetWriteDeadline(time.Now().Add(timeout))
	var err error
	switch {
	case len(bufs) == 0:
		_, err = nc.Write(b)
	case raceEnabled:
		_, err = nc.Write(bytes.Join(append([][]byte{b}, bufs...), nil))
	default:
		_, _, err = writev.To(nc, append([][]byte{b}, bufs...), math.MaxInt64)
	}
	if err != nil {
		nc.Close()
	}
	return err
}

// connError ends a connection with a GOAWAY of its code.
type connError struct {
	code http2.ErrCode
	msg  string
}

func (e connError) Error() string {
	return fmt.Sprintf("h2grpc: connection error %v: %s", e.code, e.msg)
}

func protocolError(format string, args ...any) error {
	return connError{http2.ErrCodeProtocol, fmt.Sprintf(format, args...)}
}

// ErrClosed is the error of a call on a connection that has closed.
var ErrClosed = errors.New("h2grpc: connection closed")

// setting is one SETTINGS parameter.
type setting struct {
	id  http2.SettingID
	val uint32
}

func appendSettings(b []byte, s ...setting) []byte {
	b = appendFrameHeader(b, 6*len(s), http2.FrameSettings, 0, 0)
	for _, x := range s {
		b = binary.BigEndian.AppendUint16(b, uint16(x.id))
		b = binary.BigEndian.AppendUint32(b, x.val)
	}
	return b
}

func appendWindowUpdate(b []byte, stream uint32, n uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, stream)
	return binary.BigEndian.AppendUint32(b, n)
}

func appendRST(b []byte, stream uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, stream)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

func appendGoAway(b []byte, last uint32, code http2.ErrCode, msg string) []byte {
	if len(msg) > 256 {
		msg = msg[:256]
	}
	b = appendFrameHeader(b, 8+len(msg), http2.FrameGoAway, 0, 0)
	b = binary.BigEndian.AppendUint32(b, last)
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	return append(b, msg...)
}

// peerSettings are the SETTINGS a peer has sent that this package obeys.
type peerSettings struct {
	window     int32  // initial stream window for what we send
	maxFrame   uint32 // largest DATA or HEADERS frame we may send
	tableSize  uint32 // HPACK dynamic table size the peer's decoder allows
	maxStreams uint32 // streams the peer lets us open (clients only)
}

func defaultPeerSettings() peerSettings {
	return peerSettings{window: defaultWindow, maxFrame: defaultFrame, tableSize: 4096, maxStreams: 1<<31 - 1}
}

// apply reads a SETTINGS frame's payload into p; delta is how much the
// initial stream window grew (negative if it shrank).
func (p *peerSettings) apply(payload []byte) (delta int64, err error) {
	if len(payload)%6 != 0 {
		return 0, connError{http2.ErrCodeFrameSize, "SETTINGS payload not a multiple of 6"}
	}
	for ; len(payload) > 0; payload = payload[6:] {
		id, v := http2.SettingID(binary.BigEndian.Uint16(payload)), binary.BigEndian.Uint32(payload[2:])
		switch id {
		case http2.SettingInitialWindowSize:
			if v > maxWindow {
				return 0, connError{http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1"}
			}
			delta += int64(v) - int64(p.window)
			p.window = int32(v)
		case http2.SettingMaxFrameSize:
			if v < defaultFrame || v > maxFrame {
				return 0, protocolError("SETTINGS_MAX_FRAME_SIZE %d out of range", v)
			}
			p.maxFrame = v
		case http2.SettingHeaderTableSize:
			p.tableSize = v
		case http2.SettingMaxConcurrentStreams:
			p.maxStreams = v
		case http2.SettingEnablePush:
			if v > 1 {
				return 0, protocolError("SETTINGS_ENABLE_PUSH %d", v)
			}
		}
	}
	return delta, nil
}

// headerBlock gathers a HEADERS frame and its CONTINUATION frames and
// decodes them, within a bound on their encoded and decoded sizes.
type headerBlock struct {
	dec    *hpack.Decoder
	limit  int // decoded header list size bound (names + values + 32 each)
	fields []hpack.HeaderField
	size   int
	over   bool
	// selfDependent reports that the last HEADERS read named its own
	// stream as its priority dependency: a stream error (RFC 9113, 5.3.1).
	selfDependent bool
}

func newHeaderBlock(limit int) *headerBlock {
	h := &headerBlock{limit: limit}
	h.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		h.size += int(f.Size())
		if h.size > h.limit {
			h.over = true
			return
		}
		h.fields = append(h.fields, f)
	})
	// A string longer than the limit is reported by the size count
	// (tooLarge), not by the decoder: the call gets an answer and the
	// connection goes on. Blocks are bounded before decoding.
	h.dec.SetMaxStringLength(4*limit + 4096)
	return h
}

// read reads a header block whose first fragment is the payload of the
// HEADERS frame h (length bytes, padding and priority still in it) and whose
// other fragments follow as CONTINUATION frames, and decodes it. The fields
// are valid until the next read. tooLarge reports a block whose decoded size
// passed the limit: the connection is still usable.
func (b *headerBlock) read(r *bufio.Reader, h frameHeader, scratch []byte) (fields []hpack.HeaderField, tooLarge bool, buf []byte, err error) {
	b.fields, b.size, b.over, b.selfDependent = b.fields[:0], 0, false, false
	encodedLimit := 2*b.limit + 1024
	if int(h.length) > encodedLimit {
		return nil, false, scratch, connError{http2.ErrCodeEnhanceYourCalm, "header block too large"}
	}
	buf = slices.Grow(scratch[:0], int(h.length))[:h.length]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, false, buf, err
	}
	frag := buf
	pad := 0
	if h.has(http2.FlagHeadersPadded) {
		if len(frag) < 1 {
			return nil, false, buf, protocolError("padded HEADERS without a pad length")
		}
		pad, frag = int(frag[0]), frag[1:]
	}
	if h.has(http2.FlagHeadersPriority) {
		if len(frag) < 5 {
			return nil, false, buf, protocolError("HEADERS priority truncated")
		}
		b.selfDependent = binary.BigEndian.Uint32(frag)&(1<<31-1) == h.stream
		frag = frag[5:]
	}
	if pad > len(frag) {
		return nil, false, buf, protocolError("HEADERS padding longer than the frame")
	}
	frag = frag[:len(frag)-pad]
	block := frag
	end := h.has(http2.FlagHeadersEndHeaders)
	var hb [headerLen]byte
	for frames := 1; !end; frames++ {
		ch, err := readFrameHeader(r, &hb)
		if err != nil {
			return nil, false, buf, err
		}
		if ch.typ != http2.FrameContinuation || ch.stream != h.stream {
			return nil, false, buf, protocolError("%v on stream %d while a header block on stream %d is open", ch.typ, ch.stream, h.stream)
		}
		if ch.length > maxHeaderFrame {
			return nil, false, buf, connError{http2.ErrCodeFrameSize, fmt.Sprintf("CONTINUATION frame of %d bytes (at most %d)", ch.length, maxHeaderFrame)}
		}
		if frames >= maxHeaderBlockFrames {
			return nil, false, buf, connError{http2.ErrCodeEnhanceYourCalm, fmt.Sprintf("header block of more than %d frames", maxHeaderBlockFrames)}
		}
		if len(block)+int(ch.length) > encodedLimit {
			return nil, false, buf, connError{http2.ErrCodeEnhanceYourCalm, "header block too large"}
		}
		start := len(block)
		block = slices.Grow(block, int(ch.length))[:start+int(ch.length)]
		if _, err := io.ReadFull(r, block[start:]); err != nil {
			return nil, false, buf, err
		}
		end = ch.has(http2.FlagContinuationEndHeaders)
	}
	if _, err := b.dec.Write(block); err != nil {
		return nil, false, buf, connError{http2.ErrCodeCompression, err.Error()}
	}
	if err := b.dec.Close(); err != nil {
		return nil, false, buf, connError{http2.ErrCodeCompression, err.Error()}
	}
	return b.fields, b.over, buf, nil
}

// headerWriter encodes header blocks for one connection; calls are
// serialised by the connection's write lock.
type headerWriter struct {
	enc *hpack.Encoder
	buf []byte
}

func newHeaderWriter() *headerWriter {
	w := &headerWriter{}
	w.enc = hpack.NewEncoder((*appendWriter)(&w.buf))
	return w
}

type appendWriter []byte

func (w *appendWriter) Write(p []byte) (int, error) { *w = append(*w, p...); return len(p), nil }

// appendBlock appends to b a HEADERS frame on stream (with CONTINUATION
// frames when the block exceeds maxFrame or maxHeaderFrame) carrying
// fields, in pairs.
func (w *headerWriter) appendBlock(b []byte, stream uint32, endStream bool, maxFrame uint32, fields ...string) []byte {
	w.buf = w.buf[:0]
	for i := 0; i+1 < len(fields); i += 2 {
		w.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	block := w.buf
	typ, flags := http2.FrameHeaders, http2.Flags(0)
	if endStream {
		flags |= http2.FlagHeadersEndStream
	}
	for {
		n := min(len(block), int(maxFrame), maxHeaderFrame)
		f := flags
		if n == len(block) {
			f |= http2.FlagHeadersEndHeaders
		}
		b = appendFrameHeader(b, n, typ, f, stream)
		b = append(b, block[:n]...)
		block = block[n:]
		if len(block) == 0 {
			return b
		}
		typ, flags = http2.FrameContinuation, 0
	}
}

// grpcMessageEncode percent-encodes a grpc-message value as gRPC's HTTP/2
// mapping asks: bytes outside printable ASCII, and '%', become %XX.
func grpcMessageEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c > '~' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// grpcMessageDecode undoes grpcMessageEncode; malformed escapes stay as
// they are.
func grpcMessageDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

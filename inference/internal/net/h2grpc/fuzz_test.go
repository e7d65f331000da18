package h2grpc

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// heldSink is a bytesSink that keeps count, in held, of the bytes every
// such sink holds now, and in peak of the most they held at once.
type heldSink struct {
	bytesSink
	held, peak *atomic.Int64
}

func (s *heldSink) Buffer(n int) []byte {
	before := cap(s.buf)
	b := s.bytesSink.Buffer(n)
	if now := s.held.Add(int64(cap(s.buf) - before)); now > s.peak.Load() {
		s.peak.Store(now)
	}
	return b
}

func (s *heldSink) Release() { s.held.Add(-int64(cap(s.buf))); s.bytesSink.Release() }

func (s *heldSink) Decode(m any) error {
	err := s.bytesSink.Decode(m)
	s.Release()
	return err
}

// fuzzSeeds are client byte streams after the preface: a call, and some of
// the attacks the server bounds.
func fuzzSeeds() [][]byte {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", inferMethod}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	msg, _ := proto.Marshal(&v2pb.ModelInferRequest{Id: "x", RawInputContents: [][]byte{{1, 2, 3}}})
	data := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)

	var seeds [][]byte
	seed := func(f func()) {
		b.Reset()
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		f()
		seeds = append(seeds, bytes.Clone(b.Bytes()))
	}
	seed(func() { // a call
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
		fr.WriteData(1, true, data)
		fr.WritePing(false, [8]byte{1})
	})
	seed(func() { // a call reset, and one on a lower id
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hb.Bytes(), EndHeaders: true})
		fr.WriteData(3, false, data[:4])
		fr.WriteRSTStream(3, http2.ErrCodeCancel)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	})
	seed(func() { // a header block in CONTINUATION frames, some empty
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes()[:3]})
		fr.WriteContinuation(1, false, nil)
		fr.WriteContinuation(1, true, hb.Bytes()[3:])
	})
	seed(func() { // a message announcing 1 GB
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
		fr.WriteData(1, false, []byte{0, 0x40, 0, 0, 0, 1})
	})
	seed(func() { // window updates, priority, settings, goaway
		fr.WriteWindowUpdate(0, 1<<30)
		fr.WritePriority(1, http2.PriorityParam{StreamDep: 1})
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
		fr.WriteGoAway(0, http2.ErrCodeNo, []byte("bye"))
	})
	return seeds
}

// FuzzServerFrames feeds a server a client's bytes after the preface,
// whatever they are: the server must not panic, must read them all and end
// the connection within a bound once the client has gone, and must hold
// no more message bytes than twice what it was sent (buffers grow as bytes
// arrive, whatever a prefix claims).
func FuzzServerFrames(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var held, peak atomic.Int64
		s := NewServer(ServerOptions{MaxMessageBytes: 1 << 30, MaxStreams: 8, HandshakeTimeout: time.Minute,
			Sink: func(string, int) Sink { return &heldSink{held: &held, peak: &peak} }})
		v2pb.RegisterGRPCInferenceServiceServer(s, &echo{})
		ln := newPipeListener()
		var wg sync.WaitGroup
		wg.Go(func() { s.Serve(ln) })
		client, server := net.Pipe()
		ln.conns <- server
		wg.Go(func() { io.Copy(io.Discard, client) })
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			io.WriteString(client, preface)
			client.Write(in)
		}()
		select {
		case <-wrote:
		case <-time.After(10 * time.Second):
			t.Fatalf("the server read none of the last bytes for 10 s")
		}
		client.Close()
		stopped := make(chan struct{})
		go func() {
			s.Stop()
			wg.Wait()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatalf("the server did not stop within 10 s of its client leaving")
		}
		if p := peak.Load(); p > int64(2*len(in)+4096) {
			t.Fatalf("the server held %d bytes of messages, sent %d", p, len(in))
		}
	})
}

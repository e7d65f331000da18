package protocol_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// claimBatch is the batch of the requests of the tests of declared
// lengths: 6 MiB of FP32 input each, so that what a claim would allocate
// stands out of what a test allocates anyway.
const claimBatch = 512

// claimServers serves a model of MaxBatch claimBatch, with an in-flight
// budget of one such request, on both gRPC servers; it returns their
// addresses by implementation.
func claimServers(t *testing.T) map[string]string {
	t.Helper()
	cfg := inference.Config{Options: inference.Options{Height: side, Width: side, MaxBatch: claimBatch}, Model: tinyModel(t)}
	srv, err := inference.New(cfg)
	require.NoError(t, err)
	m, err := protocol.NewModel(srv, protocol.ModelConfig{InflightBytes: 1})
	require.NoError(t, err)
	svc := protocol.New(m, protocol.Options{})
	addrs := map[string]string{}
	var gs []protocol.GRPCServer
	for _, impl := range []string{protocol.GRPCServerH2, protocol.GRPCServerGo} {
		g, err := svc.NewGRPCServer(impl, protocol.GRPCLimits{})
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addrs[impl] = ln.Addr().String()
		go g.Serve(ln)
		gs = append(gs, g)
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Stop()
		}
		svc.Close()
		srv.Close()
	})
	return addrs
}

// h2Peer is a hand-driven HTTP/2 client of a gRPC server.
type h2Peer struct {
	t   *testing.T
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func dialH2(t *testing.T, addr string) *h2Peer {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	p := &h2Peer{t: t, fr: http2.NewFramer(nc, nc)}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.buf)
	_, err = io.WriteString(nc, http2.ClientPreface)
	require.NoError(t, err)
	require.NoError(t, p.fr.WriteSettings())
	return p
}

// call opens stream id as a ModelInfer call and sends data (a gRPC
// message, whole or not) on it, ending the stream with end.
func (p *h2Peer) call(id uint32, data []byte, end bool) {
	p.buf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", v2pb.GRPCInferenceService_ModelInfer_FullMethodName},
		{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		p.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	require.NoError(p.t, p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.buf.Bytes(), EndHeaders: true}))
	for len(data) > 0 || end {
		n := min(len(data), 16<<10)
		require.NoError(p.t, p.fr.WriteData(id, end && n == len(data), data[:n]))
		data = data[n:]
		if len(data) == 0 {
			break
		}
	}
}

// sync sends a PING and waits for its answer: the server has read every
// frame sent before it.
func (p *h2Peer) sync() {
	require.NoError(p.t, p.fr.WritePing(false, [8]byte{7}))
	for {
		f, err := p.fr.ReadFrame()
		require.NoError(p.t, err)
		if pf, ok := f.(*http2.PingFrame); ok && pf.IsAck() {
			return
		}
	}
}

// status waits for stream id's closing HEADERS and returns its gRPC status.
func (p *h2Peer) status(id uint32) (codes.Code, string) {
	for {
		f, err := p.fr.ReadFrame()
		require.NoError(p.t, err)
		h, ok := f.(*http2.MetaHeadersFrame)
		if !ok || h.StreamID != id || !h.StreamEnded() {
			continue
		}
		n, err := strconv.Atoi(h.PseudoValue("status"))
		require.NoError(p.t, err)
		require.Equal(p.t, 200, n)
		var code codes.Code
		var msg string
		for _, hf := range h.RegularFields() {
			switch hf.Name {
			case "grpc-status":
				c, err := strconv.Atoi(hf.Value)
				require.NoError(p.t, err)
				code = codes.Code(c)
			case "grpc-message":
				msg = hf.Value
			}
		}
		return code, msg
	}
}

// grpcMessage is b with gRPC's 5-byte prefix claiming size bytes.
func grpcMessage(size int, b []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(size)), b...)
}

// A request whose raw_input_contents announce a batch's bytes and which
// then sends nothing costs what arrived, not what it announced: 16 such
// calls on one connection (about 1.5 KB sent) allocate less than two
// announced inputs (one lent from the in-flight budget, which has room for
// one), on both gRPC servers. Before, h2grpc allocated every announced
// input (16 x 6 MiB) as its length arrived.
func TestAnnouncedRawInputsCostOnlyWhatArrives(t *testing.T) {
	addrs := claimServers(t)
	n := int64(claimBatch * 3 * side * side * 4)
	for _, tc := range []struct {
		name     string
		datatype string
	}{
		{"fp32, lent from the budget", protocol.FP32}, // the first lent, the others grow
		{"uint8, grown as bytes arrive", protocol.UINT8},
	} {
		for _, impl := range []string{protocol.GRPCServerH2, protocol.GRPCServerGo} {
			t.Run(tc.name+", "+impl, func(t *testing.T) {
				size := n
				if tc.datatype == protocol.UINT8 {
					size = n / 4
				}
				head, err := proto.Marshal(&v2pb.ModelInferRequest{ModelName: "resnet18", Inputs: []*v2pb.ModelInferRequest_InferInputTensor{
					{Name: protocol.InputName, Datatype: tc.datatype, Shape: []int64{claimBatch, 3, side, side}}}})
				require.NoError(t, err)
				head = protowire.AppendVarint(protowire.AppendTag(head, 7, protowire.BytesType), uint64(size))
				msg := grpcMessage(len(head)+int(size), head)
				p := dialH2(t, addrs[impl])
				const calls = 16
				got := allocated(func() {
					for i := range calls {
						p.call(uint32(2*i+1), msg, false)
					}
					p.sync()
				})
				t.Logf("%d calls announcing %d bytes each, %d bytes sent in all: %d bytes allocated", calls, size, calls*len(msg), got)
				assert.Less(t, got, uint64(2*n), "bytes allocated")
			})
		}
	}
}

// A request is decoded only up to the first count over one of
// RequestLimits, and refused with ResourceExhausted: a million empty inputs
// (2 MB) no longer cost a million decoded tensors, and an id longer than
// MaxIDBytes is refused, on both gRPC servers.
func TestDeclarationsOverTheBoundsAreRefused(t *testing.T) {
	addrs := claimServers(t)
	inputs := make([]byte, 0, 2<<20)
	for range 1 << 20 {
		inputs = protowire.AppendTag(inputs, 5, protowire.BytesType)
		inputs = append(inputs, 0)
	}
	params := []byte{}
	for i := range protocol.DefaultMaxParameters + 1 {
		entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "k"+strconv.Itoa(i))
		params = protowire.AppendBytes(protowire.AppendTag(params, 4, protowire.BytesType), entry)
	}
	// An input whose shape has 2M dimensions, and one whose contents are
	// 2M empty bytes_contents.
	var dims, entries []byte
	for range 2 << 20 {
		dims = append(dims, 1)
		entries = protowire.AppendBytes(protowire.AppendTag(entries, 8, protowire.BytesType), nil)
	}
	shape := protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType),
		protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), dims))
	contents := protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType),
		protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), entries))
	id, err := proto.Marshal(&v2pb.ModelInferRequest{ModelName: "resnet18", Id: strings.Repeat("<", protocol.DefaultMaxIDBytes+1)})
	require.NoError(t, err)
	okID, err := proto.Marshal(&v2pb.ModelInferRequest{ModelName: "resnet18", Id: strings.Repeat("<", protocol.DefaultMaxIDBytes)})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		msg  []byte
		code codes.Code
		want string // in the status message
	}{
		{"a million empty inputs", inputs, codes.ResourceExhausted, "more than 16 inputs"},
		{"65 parameters", params, codes.ResourceExhausted, "more than 64 parameters"},
		{"a shape of 2M dimensions", shape, codes.ResourceExhausted, "dimensions in the shape of input 1"},
		{"2M empty bytes_contents", contents, codes.ResourceExhausted, "values in the contents of input 1"},
		{"an id over MaxIDBytes", id, codes.ResourceExhausted, "bytes in its id"},
		{"an id of MaxIDBytes", okID, codes.InvalidArgument, "inputs"},
	} {
		for _, impl := range []string{protocol.GRPCServerH2, protocol.GRPCServerGo} {
			t.Run(tc.name+", "+impl, func(t *testing.T) {
				p := dialH2(t, addrs[impl])
				var code codes.Code
				var msg string
				got := allocated(func() {
					p.call(1, grpcMessage(len(tc.msg), tc.msg), true)
					code, msg = p.status(1)
				})
				t.Logf("%d bytes sent: %d bytes allocated; %v %q", len(tc.msg), got, code, msg)
				assert.Equal(t, tc.code, code, msg)
				assert.Contains(t, msg, tc.want)
				// The message itself is held once or twice (grpc-go's
				// frames, then the sink's gathered fields); decoding a
				// tensor per input would cost 30 times more.
				assert.Less(t, got, uint64(8*len(tc.msg)+(4<<20)), "bytes allocated")
			})
		}
	}
}

// The h2grpc server answers a request over a bound as soon as the sink
// counts past it, not once the rest of the message has arrived: an id
// announced at 1 MiB, with nothing after its length, is refused at once.
func TestOverLimitIsAnsweredBeforeTheRestArrives(t *testing.T) {
	addrs := claimServers(t)
	head := protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.BytesType), 1<<20)
	p := dialH2(t, addrs[protocol.GRPCServerH2])
	p.call(1, grpcMessage(len(head)+1<<20, head), false)
	code, msg := p.status(1)
	assert.Equal(t, codes.ResourceExhausted, code, msg)
	assert.Contains(t, msg, "bytes in its id")
}

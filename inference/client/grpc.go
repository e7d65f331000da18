package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference/internal/net/bufpool"
	"github.com/inferbench/inferbench/inference/internal/net/h2grpc"
	"github.com/inferbench/inferbench/inference/v2pb"
	"github.com/inferbench/inferbench/internal/busyread"
)

// GRPCOptions configure a gRPC client.
type GRPCOptions struct {
	// MaxMessageBytes bounds a message either way; 0 means 1 GiB.
	MaxMessageBytes int
	// DialOptions are added to the client's own (plaintext, message sizes,
	// flow-control windows sized for batch-sized messages).
	DialOptions []grpc.DialOption
	// Conns is how many HTTP/2 connections Infer spreads its calls over,
	// each call on one with the fewest Infer calls in flight (ties in
	// turn); every other call uses the first. One connection has one
	// writer, which a few large requests in flight can keep busy. If Conns
	// is 0, one connection is used.
	Conns int
	// Stream sends Infer's requests as messages of a ModelStreamInfer call
	// per connection (Triton's streaming inference, as perf_analyzer's
	// --streaming does) instead of one ModelInfer call each: no HTTP/2
	// stream to open, no headers or trailers per request. Answers are
	// matched to requests by id: a request without one gets one made up,
	// and a context's deadline is sent as the request's timeout parameter.
	// A failed request's error has code Unknown and the server's message
	// (a stream's answer carries no status). A request's context is watched
	// from when its message has been handed to gRPC: one stream sends one
	// message at a time, so a request waits, whatever its context, while
	// those before it on its connection are sent.
	Stream bool
	// ReadPoll, if positive, makes each connection's reads look for the
	// server's next bytes for up to this long before they sleep (package
	// busyread), as serve -idle-poll does on the server's side: lower
	// latency one request at a time, for a CPU kept busy meanwhile.
	ReadPoll time.Duration
	// TLS, if set, makes every connection TLS with this configuration
	// (LoadCA makes one that trusts a private CA; ALPN "h2" is added); nil
	// means plaintext. It is cloned, not kept.
	TLS *tls.Config
	// Transport is how Infer's ModelInfer calls travel when Stream is off:
	// TransportH2 (or "") or TransportGRPCGo. Every other call, and
	// Stream's, goes through grpc-go.
	Transport string
}

// The transports of GRPCOptions.Transport.
const (
	// TransportH2 is this module's own HTTP/2 client (package h2grpc): a
	// request goes from the caller's memory to the socket by writev, in
	// frames as large as the server takes (16 MiB from serve's own server,
	// 16 KiB from grpc-go's). It needs a target of the form host:port.
	TransportH2 = "h2grpc"
	// TransportGRPCGo is grpc-go's client, which copies each request into
	// its write buffer and sends it in 16 KiB frames.
	TransportGRPCGo = "grpc-go"
)

// GRPCClient calls a server's gRPC API over one HTTP/2 connection, or
// several for Infer (GRPCOptions.Conns); with TransportH2, Infer's
// connections are h2grpc's and every other call opens one of grpc-go's. It
// is safe for concurrent use.
type GRPCClient struct {
	conns []*grpc.ClientConn
	infer []v2pb.GRPCInferenceServiceClient // one per connection; other calls use the first
	// streams carry Infer's requests, one per connection, with
	// GRPCOptions.Stream; nil without.
	streams []*inferStream
	// unary carry Infer's ModelInfer calls, one per connection, with
	// TransportH2; nil with TransportGRPCGo or Stream.
	unary []*h2grpc.Client
	// busy picks Infer's connection: the least busy, not the next in turn.
	// Taking turns, a call could land on a connection still sending a
	// 192 MB request while another stood idle (calls end out of turn), and
	// the two requests then shared one writer's frames.
	busy *Balancer
}

// WriteBufferBytes is the size of a gRPC connection's write buffer: a
// request up to this size (a batch-1 3x250x250 FP32 image is 750 KB) leaves
// in one write system call, so the server's reader wakes for it once rather
// than for each 256 KiB piece. gRPC copies every message into this buffer
// whatever its size; each connection keeps its buffer (taking it from a
// pool for every write instead cost small requests 5 % of their latency).
const WriteBufferBytes = 1 << 20

// grpcBuffers is the gRPC clients' buffer pool.
var grpcBuffers = new(bufpool.Pool)

// NewGRPC returns a client of the server at target ("host:8001"). It
// connects lazily, on the first call.
func NewGRPC(target string, opts GRPCOptions) (*GRPCClient, error) {
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 1 << 30
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS.Clone())
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opts.MaxMessageBytes), grpc.MaxCallSendMsgSize(opts.MaxMessageBytes), codecOption()),
		grpc.WithInitialWindowSize(4 << 20),
		grpc.WithInitialConnWindowSize(16 << 20),
		grpc.WithReadBufferSize(256 << 10),
		grpc.WithWriteBufferSize(WriteBufferBytes),
		experimental.WithBufferPool(grpcBuffers), // reused without clearing (see bufpool)
	}, opts.DialOptions...)
	if opts.ReadPoll > 0 {
		dial = append(dial, grpc.WithContextDialer(dialer(opts.ReadPoll)))
	}
	c := &GRPCClient{}
	switch opts.Transport {
	case "", TransportH2:
		if strings.Contains(target, "/") {
			return nil, fmt.Errorf("client: gRPC target %q: transport %s takes host:port (transport %s takes gRPC's other forms)", target, TransportH2, TransportGRPCGo)
		}
	case TransportGRPCGo:
	default:
		return nil, fmt.Errorf("client: unknown gRPC transport %q (want %s or %s)", opts.Transport, TransportH2, TransportGRPCGo)
	}
	h2 := opts.Transport != TransportGRPCGo && !opts.Stream
	for range max(opts.Conns, 1) {
		conn, err := grpc.NewClient(target, dial...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("client: %w", err)
		}
		c.conns = append(c.conns, conn)
		c.infer = append(c.infer, v2pb.NewGRPCInferenceServiceClient(conn))
		if opts.Stream {
			c.streams = append(c.streams, &inferStream{api: c.infer[len(c.infer)-1], maxBytes: opts.MaxMessageBytes})
		}
		if h2 {
			c.unary = append(c.unary, h2grpc.NewClient(target, h2grpc.ClientOptions{
				MaxMessageBytes: opts.MaxMessageBytes, StreamWindow: 4 << 20, Dial: tlsDialer(dialer(opts.ReadPoll), opts.TLS),
			}))
		}
	}
	c.busy, _ = NewBalancer(len(c.infer))
	return c, nil
}

// dialer opens TCP connections whose reads, with poll above 0, look for
// the server's bytes for up to poll before they sleep (busyread).
func dialer(poll time.Duration) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := new(net.Dialer).DialContext(ctx, "tcp", addr)
		if err != nil || poll <= 0 {
			return c, err
		}
		return busyread.Conn(c, poll), nil
	}
}

// tlsDialer wraps dial's connections in TLS with cfg (ALPN "h2", the
// server name from the address unless cfg sets one); a nil cfg returns dial.
func tlsDialer(dial func(ctx context.Context, addr string) (net.Conn, error), cfg *tls.Config) func(ctx context.Context, addr string) (net.Conn, error) {
	if cfg == nil {
		return dial
	}
	cfg = cfg.Clone()
	if len(cfg.NextProtos) == 0 {
		cfg.NextProtos = []string{"h2"}
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		conf := cfg
		if conf.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				c.Close()
				return nil, err
			}
			conf = cfg.Clone()
			conf.ServerName = host
		}
		tc := tls.Client(c, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("client: TLS handshake with %s: %w", addr, err)
		}
		return tc, nil
	}
}

// LoadCA returns a TLS configuration that trusts only the PEM certificates
// in caFile, for GRPCOptions.TLS and HTTPOptions.TLS.
func LoadCA(caFile string) (*tls.Config, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("client: reading CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("client: CA file %s holds no PEM certificate", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// API is the generated stub, for calls this package does not wrap.
func (c *GRPCClient) API() v2pb.GRPCInferenceServiceClient { return c.infer[0] }

// Close closes the connections and ends the streams of GRPCOptions.Stream:
// calls waiting on them fail.
func (c *GRPCClient) Close() error {
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	for _, s := range c.streams {
		s.close()
	}
	for _, u := range c.unary {
		errs = append(errs, u.Close())
	}
	return errors.Join(errs...)
}

// grpcErr turns a status error into an *Error.
func grpcErr(err error) error {
	if s, ok := status.FromError(err); ok {
		return &Error{Code: s.Code(), Msg: s.Message()}
	}
	return err
}

func (c *GRPCClient) Live(ctx context.Context) (bool, error) {
	r, err := c.API().ServerLive(ctx, &v2pb.ServerLiveRequest{})
	if err != nil {
		return false, grpcErr(err)
	}
	return r.GetLive(), nil
}

func (c *GRPCClient) Ready(ctx context.Context) (bool, error) {
	r, err := c.API().ServerReady(ctx, &v2pb.ServerReadyRequest{})
	if err != nil {
		return false, grpcErr(err)
	}
	return r.GetReady(), nil
}

func (c *GRPCClient) ModelReady(ctx context.Context, model, version string) (bool, error) {
	r, err := c.API().ModelReady(ctx, &v2pb.ModelReadyRequest{Name: model, Version: version})
	if err != nil {
		return false, grpcErr(err)
	}
	return r.GetReady(), nil
}

func (c *GRPCClient) ServerMetadata(ctx context.Context) (*ServerMetadata, error) {
	r, err := c.API().ServerMetadata(ctx, &v2pb.ServerMetadataRequest{})
	if err != nil {
		return nil, grpcErr(err)
	}
	return &ServerMetadata{Name: r.GetName(), Version: r.GetVersion(), Extensions: r.GetExtensions()}, nil
}

func (c *GRPCClient) ModelMetadata(ctx context.Context, model, version string) (*ModelMetadata, error) {
	r, err := c.API().ModelMetadata(ctx, &v2pb.ModelMetadataRequest{Name: model, Version: version})
	if err != nil {
		return nil, grpcErr(err)
	}
	m := &ModelMetadata{Name: r.GetName(), Versions: r.GetVersions(), Platform: r.GetPlatform()}
	for _, t := range r.GetInputs() {
		m.Inputs = append(m.Inputs, TensorMetadata{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: t.GetShape()})
	}
	for _, t := range r.GetOutputs() {
		m.Outputs = append(m.Outputs, TensorMetadata{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: t.GetShape()})
	}
	return m, nil
}

// Infer sends req with raw_input_contents (the inputs' bytes are not copied
// before marshalling), or with shared-memory parameters for inputs that have
// a Region, on the connection with the fewest Infer calls in flight.
func (c *GRPCClient) Infer(ctx context.Context, req *InferRequest) (*InferResponse, error) {
	conn, release := 0, func() {}
	if len(c.infer) > 1 {
		conn, release = c.busy.Acquire()
	}
	defer release()
	return c.inferOn(ctx, conn, req)
}

// Conns is the number of connections Infer spreads its calls over.
func (c *GRPCClient) Conns() int { return len(c.infer) }

// InferOn is Infer on connection conn (0 to Conns()-1), whatever is in flight
// there: to warm every connection before measuring (the first large request
// on a connection pays for its buffers and its TCP window's growth), or to
// keep a stream of calls on one.
func (c *GRPCClient) InferOn(ctx context.Context, conn int, req *InferRequest) (*InferResponse, error) {
	if conn < 0 || conn >= len(c.infer) {
		return nil, fmt.Errorf("client: connection %d of %d", conn, len(c.infer))
	}
	return c.inferOn(ctx, conn, req)
}

func (c *GRPCClient) inferOn(ctx context.Context, conn int, req *InferRequest) (*InferResponse, error) {
	r := &v2pb.ModelInferRequest{ModelName: req.Model, ModelVersion: req.Version, Id: req.ID}
	if req.TimeoutMicros > 0 {
		r.Parameters = map[string]*v2pb.InferParameter{"timeout": {ParameterChoice: &v2pb.InferParameter_Int64Param{Int64Param: req.TimeoutMicros}}}
	}
	for _, t := range req.Inputs {
		in := &v2pb.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
		if t.Region != nil {
			in.Parameters = t.Region.grpcParams()
		} else {
			r.RawInputContents = append(r.RawInputContents, t.Data)
		}
		r.Inputs = append(r.Inputs, in)
	}
	for _, name := range outputNames(req) {
		o := &v2pb.ModelInferRequest_InferRequestedOutputTensor{Name: name}
		if reg, ok := req.OutputRegions[name]; ok {
			o.Parameters = reg.grpcParams()
		}
		r.Outputs = append(r.Outputs, o)
	}
	if c.streams != nil {
		resp, err := c.streams[conn].infer(ctx, r)
		if err != nil {
			return nil, err
		}
		return fromGRPC(resp, req.OutputRegions)
	}
	if c.unary != nil {
		resp, err := c.inferH2(ctx, conn, r)
		if err != nil {
			return nil, grpcErr(err)
		}
		return fromGRPC(resp, req.OutputRegions)
	}
	resp, err := c.infer[conn].ModelInfer(ctx, r)
	if err != nil {
		return nil, grpcErr(err)
	}
	return fromGRPC(resp, req.OutputRegions)
}

// inferH2 makes a ModelInfer call through connection conn's h2grpc client.
func (c *GRPCClient) inferH2(ctx context.Context, conn int, r *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	parts, err := inferParts(r)
	if err != nil {
		return nil, err
	}
	b, err := c.unary[conn].Invoke(ctx, v2pb.GRPCInferenceService_ModelInfer_FullMethodName, parts...)
	if err != nil {
		return nil, err
	}
	resp := &v2pb.ModelInferResponse{}
	if err := proto.Unmarshal(b, resp); err != nil {
		return nil, fmt.Errorf("client: decoding the ModelInfer response: %w", err)
	}
	return resp, nil
}

// fromGRPC reads a response's outputs from raw_output_contents or, when the
// server sent typed contents, from fp32_contents.
// An output asked for in regions carries no data (see readInfer).
func fromGRPC(resp *v2pb.ModelInferResponse, regions map[string]Region) (*InferResponse, error) {
	out := &InferResponse{ModelName: resp.GetModelName(), ModelVersion: resp.GetModelVersion(), ID: resp.GetId()}
	raw := resp.GetRawOutputContents()
	if len(raw) > 0 && len(raw) != len(resp.GetOutputs()) {
		return nil, fmt.Errorf("client: %d raw_output_contents for %d outputs", len(raw), len(resp.GetOutputs()))
	}
	for i, o := range resp.GetOutputs() {
		t := Tensor{Name: o.GetName(), Datatype: o.GetDatatype(), Shape: o.GetShape()}
		reg, err := answeredRegion(o.GetName(), regions, grpcParams(o.GetParameters()))
		if err != nil {
			return nil, err
		}
		if reg != nil {
			t.Region = reg
			out.Outputs = append(out.Outputs, t)
			continue
		}
		switch {
		case len(raw) > 0:
			t.Data = raw[i]
		case o.GetDatatype() == "FP32":
			v := o.GetContents().GetFp32Contents()
			t.Data = make([]byte, 4*len(v))
			for j, f := range v {
				binary.LittleEndian.PutUint32(t.Data[4*j:], math.Float32bits(f))
			}
		default:
			return nil, fmt.Errorf("client: output %q: typed %s contents not supported", o.GetName(), o.GetDatatype())
		}
		if n := elements(t.Shape); n >= 0 && o.GetDatatype() == "FP32" && int64(len(t.Data)) != 4*n {
			return nil, fmt.Errorf("client: output %q: %d bytes for shape %v", t.Name, len(t.Data), t.Shape)
		}
		out.Outputs = append(out.Outputs, t)
	}
	return out, nil
}

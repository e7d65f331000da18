package protocol

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/internal/net/bufpool"
	"github.com/inferbench/inferbench/inference/internal/net/h2grpc"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// DefaultStreamWindow is a gRPC call's default HTTP/2 receive window: large
// enough that a ModelStreamInfer call carrying several batch-256 requests
// (192 MB each) sends the next while the server decodes the one before. A
// call's message is buffered whole anyway (up to MaxMessageBytes), so a
// larger window holds no more of a peer's bytes than a message may.
const DefaultStreamWindow = 64 << 20

// GRPCLimits bound what one peer can make a gRPC server hold.
type GRPCLimits struct {
	// MaxMessageBytes bounds a received or sent message; 0 means the
	// Service's HTTP body limit (one MaxBatch FP32 request plus 1 MiB).
	MaxMessageBytes int
	// MaxStreams bounds concurrent calls per connection; 0 means 128.
	MaxStreams uint32
	// IdleTimeout closes a connection without calls (grpc-go) or on which
	// no call has begun, sent request bytes or ended (h2grpc) for this
	// long; PINGs do not count. 0 means 5 minutes.
	IdleTimeout time.Duration
	// StreamWindow is each call's HTTP/2 receive window: how many bytes a
	// client may send on a call ahead of what the server has read; a
	// connection's is 4 times it. 0 means DefaultStreamWindow; more than MaxMessageBytes
	// (a call's message is buffered up to that anyway) or 256 MiB counts as
	// that.
	StreamWindow int32
	// Conns, if set, hears when each connection's calls go from none to
	// some and back (a connection limit that closes idle ones).
	Conns ConnTracker
}

// The limits both gRPC servers take that GRPCLimits does not set: the
// size of a call's header list, and how long a new connection has for its
// HTTP/2 preface and settings.
const (
	grpcMaxHeaderBytes   = 64 << 10
	grpcHandshakeTimeout = 10 * time.Second
)

// grpcPingPolicy is both gRPC servers' PING enforcement, grpc-go's
// defaults: a client that PINGs more often than every 5 minutes while
// calls run, or at all while none does, is sent GOAWAY ENHANCE_YOUR_CALM
// "too_many_pings" after a few strikes. PINGs do not keep a connection
// from being idle (GRPCLimits.IdleTimeout).
var grpcPingPolicy = keepalive.EnforcementPolicy{MinTime: 5 * time.Minute, PermitWithoutStream: false}

// grpcLimits is l with its defaults filled in.
func (s *Service) grpcLimits(l GRPCLimits) GRPCLimits {
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = int(s.opts.MaxBodyBytes)
	}
	if l.MaxStreams == 0 {
		l.MaxStreams = 128
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 5 * time.Minute
	}
	if l.StreamWindow <= 0 {
		l.StreamWindow = DefaultStreamWindow
	}
	l.StreamWindow = int32(min(int(l.StreamWindow), l.MaxMessageBytes, 1<<28))
	return l
}

// GRPCServerOptions are the options a grpc.Server serving s needs: message
// size limits, per-connection call limits, header size, handshake and idle
// timeouts, keepalive enforcement, and flow-control windows large enough for
// batch-sized messages.
func (s *Service) GRPCServerOptions(l GRPCLimits) []grpc.ServerOption {
	l = s.grpcLimits(l)
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxMessageBytes),
		grpc.MaxSendMsgSize(l.MaxMessageBytes),
		grpc.MaxConcurrentStreams(l.MaxStreams),
		grpc.MaxHeaderListSize(grpcMaxHeaderBytes),
		grpc.ConnectionTimeout(grpcHandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout}),
		grpc.KeepaliveEnforcementPolicy(grpcPingPolicy),
		grpc.InitialWindowSize(l.StreamWindow),
		grpc.InitialConnWindowSize(4 * l.StreamWindow),
		// Buffers of 256 KiB (gRPC's are 32 KiB) cut the system calls for a
		// 750 KB batch-1 request: its p50 round trip fell by a quarter
		// (BenchmarkTransport, nop). The write buffer goes back to a pool
		// between writes, so an idle connection holds only the read one.
		grpc.ReadBufferSize(256 << 10),
		grpc.WriteBufferSize(256 << 10),
		grpc.SharedWriteBuffer(true),
		// Frame and message buffers reused without clearing (see bufpool).
		experimental.BufferPool(grpcBuffers),
		// Reuse a fixed set of goroutines for calls instead of one per call.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		s.codecOption(),
	}
	if l.Conns != nil {
		opts = append(opts, grpc.StatsHandler(callTracker{l.Conns}))
	}
	return opts
}

// grpcBuffers is the gRPC servers' buffer pool.
var grpcBuffers = new(bufpool.Pool)

// GRPCServer serves a Service's gRPC API: a *grpc.Server, or this module's
// own HTTP/2 server (GRPCServerH2).
type GRPCServer interface {
	// Serve accepts connections on ln until the server stops
	// (grpc.ErrServerStopped) or ln fails.
	Serve(ln net.Listener) error
	// GracefulStop stops taking calls and returns once those accepted
	// are answered.
	GracefulStop()
	// Stop closes every connection now.
	Stop()
}

// The gRPC server implementations NewGRPCServer knows.
const (
	// GRPCServerH2 is this module's own HTTP/2 server (package h2grpc):
	// a ModelInfer request's raw input goes from the socket straight into
	// an input buffer of the pool; no copy in this process.
	GRPCServerH2 = "h2grpc"
	// GRPCServerGo is grpc-go's server: each 16 KiB frame is copied out of
	// its read buffer, then into the input buffer (inferCodec).
	GRPCServerGo = "grpc-go"
)

// NewGRPCServer returns a gRPC server of s, built on impl (GRPCServerH2 or
// GRPCServerGo), with limits l and the services of RegisterGRPC.
func (s *Service) NewGRPCServer(impl string, l GRPCLimits) (GRPCServer, error) {
	switch impl {
	case GRPCServerGo:
		g := grpc.NewServer(s.GRPCServerOptions(l)...)
		s.RegisterGRPC(g)
		return g, nil
	case GRPCServerH2:
		l = s.grpcLimits(l)
		o := h2grpc.ServerOptions{
			MaxMessageBytes: l.MaxMessageBytes, MaxStreams: l.MaxStreams, MaxHeaderBytes: grpcMaxHeaderBytes,
			StreamWindow: l.StreamWindow, IdleTimeout: l.IdleTimeout, HandshakeTimeout: grpcHandshakeTimeout,
			MinPingInterval: grpcPingPolicy.MinTime, PermitPingWithoutCalls: grpcPingPolicy.PermitWithoutStream,
			Sink: s.grpcSink, Log: s.opts.Log,
		}
		if l.Conns != nil {
			o.OnIdle = func(c net.Conn, idle bool) { l.Conns.SetBusy(c, !idle) }
			o.OnConn = l.Conns.SetGoodbye
		}
		g := h2grpc.NewServer(o)
		s.RegisterGRPC(g)
		return g, nil
	}
	return nil, fmt.Errorf("protocol: unknown gRPC server %q (want %s or %s)", impl, GRPCServerH2, GRPCServerGo)
}

// RegisterGRPC registers on g the inference.GRPCInferenceService, the
// standard grpc.health.v1 service (for Kubernetes gRPC probes: SERVING
// exactly when Ready) and server reflection (so grpcurl needs no .proto).
func (s *Service) RegisterGRPC(g reflection.GRPCServer) {
	v2pb.RegisterGRPCInferenceServiceServer(g, grpcService{s: s})
	registerHealth(g, s)
	reflection.Register(g)
}

type grpcService struct {
	v2pb.UnimplementedGRPCInferenceServiceServer
	s *Service
}

func (g grpcService) ServerLive(context.Context, *v2pb.ServerLiveRequest) (*v2pb.ServerLiveResponse, error) {
	return &v2pb.ServerLiveResponse{Live: true}, nil
}

func (g grpcService) ServerReady(context.Context, *v2pb.ServerReadyRequest) (*v2pb.ServerReadyResponse, error) {
	return &v2pb.ServerReadyResponse{Ready: g.s.Ready()}, nil
}

func (g grpcService) ModelReady(_ context.Context, r *v2pb.ModelReadyRequest) (*v2pb.ModelReadyResponse, error) {
	if _, err := g.s.lookup(r.GetName(), r.GetVersion()); err != nil {
		return nil, g.s.grpcError(err)
	}
	return &v2pb.ModelReadyResponse{Ready: g.s.Ready()}, nil
}

func (g grpcService) ServerMetadata(context.Context, *v2pb.ServerMetadataRequest) (*v2pb.ServerMetadataResponse, error) {
	return &v2pb.ServerMetadataResponse{Name: g.s.opts.Name, Version: g.s.opts.Version, Extensions: g.s.Extensions()}, nil
}

func (g grpcService) ModelMetadata(_ context.Context, r *v2pb.ModelMetadataRequest) (*v2pb.ModelMetadataResponse, error) {
	m, err := g.s.lookup(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	return &v2pb.ModelMetadataResponse{
		Name: m.name, Versions: []string{m.version}, Platform: Platform,
		Inputs:  []*v2pb.ModelMetadataResponse_TensorMetadata{{Name: InputName, Datatype: FP32, Shape: m.InputShape()}},
		Outputs: []*v2pb.ModelMetadataResponse_TensorMetadata{{Name: OutputName, Datatype: FP32, Shape: m.OutputShape()}},
	}, nil
}

// ModelInfer runs one request. Raw input contents (and inputs in shared
// memory) are answered with raw output contents (as Triton always does),
// typed contents with typed fp32_contents, and logits written into a
// shared-memory region with its parameters and no contents. The call's
// deadline, if any, is the request's timeout, and a cancelled call drops or
// discards its request.
func (g grpcService) ModelInfer(ctx context.Context, r *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	resp, err := g.s.grpcInfer(ctx, r)
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	return resp, nil
}

func (s *Service) grpcInfer(ctx context.Context, r *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	if err := overLimitOf(r); err != nil {
		return nil, err
	}
	// The codec may have read the raw input straight into a buffer of the
	// pool: take it back now, whatever happens next.
	var lent inference.Tensor
	haveLent, usedLent := false, false
	if raws := r.GetRawInputContents(); len(raws) > 0 {
		lent, haveLent = s.model.inputs.claim(raws[0])
	}
	defer func() {
		if haveLent && !usedLent {
			s.model.inputs.put(lent)
		}
	}()
	m, err := s.lookup(r.GetModelName(), r.GetModelVersion())
	if err != nil {
		return nil, err
	}
	if err := s.admit(m); err != nil {
		return nil, err
	}
	req := grpcParams(r.GetParameters())
	if err := req.refuse("request"); err != nil {
		return nil, err
	}
	if len(r.GetInputs()) != 1 {
		return nil, badRequest("request has %d inputs, model %s takes 1 (%q)", len(r.GetInputs()), m.name, InputName)
	}
	t := r.GetInputs()[0]
	n, err := m.checkInput(t.GetName(), t.GetDatatype(), t.GetShape())
	if err != nil {
		return nil, err
	}
	tp := grpcParams(t.GetParameters())
	if err := tp.refuseTensor("input " + t.GetName()); err != nil {
		return nil, err
	}
	inShm, err := tp.shmRef("input " + t.GetName())
	if err != nil {
		return nil, err
	}
	raw := len(r.GetRawInputContents()) > 0
	if inShm != nil {
		if raw || t.GetContents() != nil {
			return nil, badRequest("input %q is in shared-memory region %q and also has contents or raw_input_contents: send one of them", t.GetName(), inShm.region)
		}
	} else if err := m.checkContents(t, r.GetRawInputContents(), n); err != nil {
		return nil, err
	}
	var outShm *shmRef
	for _, o := range r.GetOutputs() {
		if o.GetName() != OutputName {
			return nil, badRequest("unknown output %q: model %s has one output, %q", o.GetName(), m.name, OutputName)
		}
		op := grpcParams(o.GetParameters())
		if err := op.refuseTensor("output " + o.GetName()); err != nil {
			return nil, err
		}
		if outShm, err = op.shmRef("output " + o.GetName()); err != nil {
			return nil, err
		}
	}
	if err := s.shmCallerGRPC(ctx, inShm, outShm); err != nil {
		return nil, err
	}
	v, ok := req[paramTimeout]
	timeout, err := timeoutParam(v, ok)
	if err != nil {
		return nil, err
	}

	var in inference.Tensor
	var doneIn func(bool)
	if inShm != nil {
		if in, doneIn, err = s.shmInput(ctx, m, t.GetName(), t.GetDatatype(), n, inShm); err != nil {
			return nil, err
		}
	} else {
		toServer := raw && m.bytesToServer(t.GetDatatype())
		switch {
		case haveLent && toServer:
			// UINT8 bytes the codec read into the head of a pool tensor.
			in, usedLent = inference.Tensor{Shape: []int{n, m.channels, m.height, m.width}, Datatype: inference.Uint8, Bytes: r.GetRawInputContents()[0]}, true
			doneIn = func(bool) { m.inputs.put(lent) }
		case haveLent:
			in, usedLent = lent, true
			doneIn = func(bool) { m.inputs.put(in) }
		case toServer:
			// The codec had no room to lend: the bytes are Go memory, which a
			// server with Config.PinnedInput must not be given; copy them
			// into a pool tensor.
			raws := r.GetRawInputContents()[0]
			buf, err := m.inputs.get(ctx, m.bufferImages(len(raws)), m.imageValues())
			if err != nil {
				return nil, err
			}
			b := floatBytes(buf.Data)[:copy(floatBytes(buf.Data), raws)]
			in = inference.Tensor{Shape: []int{n, m.channels, m.height, m.width}, Datatype: inference.Uint8, Bytes: b}
			doneIn = func(bool) { m.inputs.put(buf) }
		default:
			if in, err = m.inputs.get(ctx, n, m.imageValues()); err != nil {
				return nil, err
			}
			if raw {
				widen(in.Data, r.GetRawInputContents()[0], t.GetDatatype(), m.lut, m.height*m.width)
			} else {
				m.fillTyped(in, t)
			}
			doneIn = func(bool) { m.inputs.put(in) }
		}
	}
	logits, devLogits, doneOut, err := s.output(m, n, outShm)
	if err != nil {
		doneIn(false)
		return nil, err
	}
	if err := m.run(ctx, inference.Request{Input: in, Logits: logits, DeviceLogits: devLogits}, timeout, both(doneIn, doneOut)); err != nil {
		return nil, err
	}
	out := &v2pb.ModelInferResponse_InferOutputTensor{Name: OutputName, Datatype: FP32, Shape: []int64{int64(n), int64(m.classes)}}
	resp := &v2pb.ModelInferResponse{ModelName: m.name, ModelVersion: m.version, Id: r.GetId(), Outputs: []*v2pb.ModelInferResponse_InferOutputTensor{out}}
	switch {
	case outShm != nil:
		out.Parameters = map[string]*v2pb.InferParameter{
			paramShmRegion:   {ParameterChoice: &v2pb.InferParameter_StringParam{StringParam: outShm.region}},
			paramShmByteSize: {ParameterChoice: &v2pb.InferParameter_Int64Param{Int64Param: int64(4 * n * m.classes)}},
		}
		if outShm.offset != 0 {
			out.Parameters[paramShmOffset] = &v2pb.InferParameter{ParameterChoice: &v2pb.InferParameter_Int64Param{Int64Param: outShm.offset}}
		}
		// One (empty) raw entry per output, as Triton sends: its C++
		// client (perf_analyzer's) indexes raw_output_contents by output
		// and crashes on an answer that has none.
		resp.RawOutputContents = [][]byte{{}}
	case raw || inShm != nil:
		resp.RawOutputContents = [][]byte{leBytes(logits)}
	default:
		out.Contents = &v2pb.InferTensorContents{Fp32Contents: logits}
	}
	return resp, nil
}

// checkContents checks that the input's data is there, in one form, with the
// size its shape and datatype need.
func (m *Model) checkContents(t *v2pb.ModelInferRequest_InferInputTensor, raw [][]byte, n int) error {
	values := n * m.imageValues()
	if len(raw) > 0 {
		if len(raw) != 1 {
			return badRequest("%d raw_input_contents for 1 input", len(raw))
		}
		if t.GetContents() != nil {
			return badRequest("input %q has typed contents and raw_input_contents", t.GetName())
		}
		if want := m.byteSize(n, t.GetDatatype()); len(raw[0]) != want {
			return badRequest("input %q: %d bytes of raw contents, want %d (%s %v)", t.GetName(), len(raw[0]), want, t.GetDatatype(), t.GetShape())
		}
		return nil
	}
	c := t.GetContents()
	switch t.GetDatatype() {
	case FP32:
		if got := len(c.GetFp32Contents()); got != values {
			return badRequest("input %q: %d fp32_contents, want %d (shape %v)", t.GetName(), got, values, t.GetShape())
		}
	case UINT8:
		u := c.GetUintContents()
		if len(u) != values {
			return badRequest("input %q: %d uint_contents, want %d (shape %v)", t.GetName(), len(u), values, t.GetShape())
		}
		for i, v := range u {
			if v > 255 {
				return badRequest("input %q: uint_contents[%d] = %d is not a UINT8", t.GetName(), i, v)
			}
		}
	default:
		return badRequest("input %q: %s data must be sent as raw_input_contents", t.GetName(), t.GetDatatype())
	}
	return nil
}

// fillTyped copies checked typed contents into in.
func (m *Model) fillTyped(in inference.Tensor, t *v2pb.ModelInferRequest_InferInputTensor) {
	c := t.GetContents()
	if t.GetDatatype() == FP32 {
		copy(in.Data, c.GetFp32Contents())
		return
	}
	plane := m.height * m.width
	for i, v := range c.GetUintContents() {
		in.Data[i] = m.lut[(i/plane)%len(m.lut)][v]
	}
}

// grpcError turns err into a gRPC status error.
func (s *Service) grpcError(err error) error {
	e := asError(err)
	s.errs.addGRPC(e.Code)
	return status.Error(e.Code, e.Msg)
}

package protocol_test

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/cpu"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/resnet"
)

// The test model: resnet.Tiny at 32x32, 5 classes, on the CPU.
const (
	side    = 32
	classes = 5
)

func tinyModel(t testing.TB) *resnet.Model {
	m, err := resnet.New(resnet.Tiny(), 3)
	require.NoError(t, err)
	return m
}

// gate is a back-end wrapper whose Compute waits while the gate is closed.
type gate struct {
	backend.Backend
	open    chan struct{} // closed: compute freely
	armed   atomic.Bool   // the gate applies (after the server's first inference)
	waiting atomic.Int32  // computes blocked now
}

func newGate(b backend.Backend) *gate { return &gate{Backend: b, open: make(chan struct{})} }

func (g *gate) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	e, err := g.Backend.Open(m, opts)
	if err != nil {
		return nil, err
	}
	ws := e.Workers()
	for i, w := range ws {
		ws[i] = gatedWorker{Worker: w, g: g}
	}
	return e, nil
}

func (g *gate) release() { close(g.open) }

type gatedWorker struct {
	backend.Worker
	g *gate
}

func (w gatedWorker) Compute(s, n int) error {
	if w.g.armed.Load() {
		w.g.waiting.Add(1)
		<-w.g.open
		w.g.waiting.Add(-1)
	}
	return w.Worker.Compute(s, n)
}

// fixture is a served model with its transports on loopback.
type fixture struct {
	srv    *inference.Server
	svc    *protocol.Service
	http   *httptest.Server
	grpc   string // address of the h2grpc server
	grpcGo string // address of the grpc-go server
	gate   *gate  // nil unless asked for
}

type fixtureOpts struct {
	cfg   inference.Config
	gated bool
	opts  protocol.Options
	mcfg  protocol.ModelConfig
}

func newFixture(t testing.TB, o fixtureOpts) *fixture {
	t.Helper()
	cfg := o.cfg
	if cfg.Checkpoint == "" && cfg.Arch.Classes == 0 { // the test names no model of its own
		cfg.Model = tinyModel(t)
	}
	cfg.Height, cfg.Width = side, side
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 8
	}
	f := &fixture{}
	if o.gated {
		f.gate = newGate(cpu.New())
		cfg.Backend = f.gate
	}
	srv, err := inference.New(cfg)
	require.NoError(t, err)
	if f.gate != nil {
		f.gate.armed.Store(true)
	}
	f.srv = srv
	m, err := protocol.NewModel(srv, o.mcfg)
	require.NoError(t, err)
	f.svc = protocol.New(m, o.opts)
	f.http = httptest.NewServer(f.svc.HTTPHandler())
	// Both gRPC servers serve the Service: this module's own (h2grpc) and
	// grpc-go's.
	var grpcs []protocol.GRPCServer
	for _, impl := range []string{protocol.GRPCServerH2, protocol.GRPCServerGo} {
		g, err := f.svc.NewGRPCServer(impl, protocol.GRPCLimits{})
		require.NoError(t, err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		if impl == protocol.GRPCServerH2 {
			f.grpc = ln.Addr().String()
		} else {
			f.grpcGo = ln.Addr().String()
		}
		go g.Serve(ln)
		grpcs = append(grpcs, g)
	}
	t.Cleanup(func() {
		if f.gate != nil {
			select {
			case <-f.gate.open:
			default:
				f.gate.release()
			}
		}
		f.http.Close()
		for _, g := range grpcs {
			g.Stop()
		}
		f.svc.Close()
		srv.Close()
	})
	return f
}

func (f *fixture) httpClient(t testing.TB, json bool) *client.HTTPClient {
	c, err := client.NewHTTP(f.http.URL, client.HTTPOptions{JSON: json})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func (f *fixture) grpcClient(t testing.TB) *client.GRPCClient {
	return f.grpcClientWith(t, client.GRPCOptions{})
}

func (f *fixture) grpcClientWith(t testing.TB, o client.GRPCOptions) *client.GRPCClient {
	c, err := client.NewGRPC(f.grpc, o)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// clients are the ways a Go program reaches the server: HTTP with binary
// tensors (and reads that look before they sleep) or JSON tensors, gRPC
// ModelInfer, and gRPC ModelStreamInfer with reads that look.
func (f *fixture) clients(t testing.TB) map[string]client.Client {
	poll, err := client.NewHTTP(f.http.URL, client.HTTPOptions{ReadPoll: 200 * time.Microsecond})
	require.NoError(t, err)
	t.Cleanup(func() { poll.Close() })
	return map[string]client.Client{
		"http-binary": f.httpClient(t, false),
		"http-poll":   poll,
		"http-json":   f.httpClient(t, true),
		"grpc":        f.grpcClient(t),
		"grpc-stream": f.grpcClientWith(t, client.GRPCOptions{Stream: true, ReadPoll: 200 * time.Microsecond}),
		// The clients and servers of both gRPC transports work together.
		"grpc, grpc-go client":        f.grpcClientWith(t, client.GRPCOptions{Transport: client.TransportGRPCGo}),
		"grpc, grpc-go server":        f.grpcGoClient(t, client.GRPCOptions{}),
		"grpc-stream, grpc-go server": f.grpcGoClient(t, client.GRPCOptions{Stream: true}),
	}
}

// grpcGoClient is a client of the fixture's grpc-go server.
func (f *fixture) grpcGoClient(t testing.TB, o client.GRPCOptions) *client.GRPCClient {
	c, err := client.NewGRPC(f.grpcGo, o)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func randomImages(seed uint64, n int) []float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, n*3*side*side)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// inProcess is the server's own answer for images.
func (f *fixture) inProcess(t testing.TB, images []float32) []float32 {
	n := len(images) / (3 * side * side)
	resp, err := f.srv.Infer(context.Background(), inference.Tensor{Shape: []int{n, 3, side, side}, Data: images})
	require.NoError(t, err)
	return resp.Logits.Data
}

func inferRequest(images []float32) *client.InferRequest {
	n := int64(len(images) / (3 * side * side))
	return &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{client.FP32("input", []int64{n, 3, side, side}, images)}}
}

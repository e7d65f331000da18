package client_test

import (
	"context"
	"net"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/metrics"
	_ "github.com/inferbench/inferbench/inference/nop" // registers "nop"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/resnet"
)

// The test model: resnet.Tiny (5 classes) at 32x32 on the zero-cost nop
// back-end, which copies each image's first 5 values to its logits.
const side = 32

// served is a front door on loopback with a client of each transport.
type served struct {
	srv  *inference.Server
	http *client.HTTPClient
	grpc *client.GRPCClient
}

func serve(t *testing.T) *served {
	t.Helper()
	srv, err := inference.New(inference.Config{Options: inference.Options{Height: side, Width: side, MaxBatch: 4, Batches: []int{1, 4}}, BackendName: "nop", Arch: resnet.Tiny()})
	require.NoError(t, err)
	model, err := protocol.NewModel(srv, protocol.ModelConfig{})
	require.NoError(t, err)
	svc := protocol.New(model, protocol.Options{SharedMemory: protocol.SharedMemoryLimits{Enabled: true}}) // system shared memory in /dev/shm
	hs := httptest.NewServer(svc.HTTPHandler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(svc.GRPCServerOptions(protocol.GRPCLimits{})...)
	svc.RegisterGRPC(gs)
	go gs.Serve(ln)
	s := &served{srv: srv}
	s.http, err = client.NewHTTP(hs.URL, client.HTTPOptions{})
	require.NoError(t, err)
	s.grpc, err = client.NewGRPC(ln.Addr().String(), client.GRPCOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.http.Close()
		s.grpc.Close()
		hs.Close()
		gs.Stop()
		svc.Close()
		srv.Close()
	})
	return s
}

// infer sends one request of batch images.
func infer(t *testing.T, c client.Client, batch int) {
	t.Helper()
	in := make([]float32, batch*3*side*side)
	_, err := c.Infer(context.Background(), &client.InferRequest{Model: "resnet18",
		Inputs: []client.Tensor{client.FP32("input", []int64{int64(batch), 3, side, side}, in)}})
	require.NoError(t, err)
}

func TestModelStatisticsAgreeWithTheServer(t *testing.T) {
	s := serve(t)
	for _, tc := range []struct {
		name string
		c    interface {
			client.Client
			client.Statistics
		}
	}{{"http", s.http}, {"grpc", s.grpc}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			before, err := tc.c.ModelStatistics(ctx, "resnet18", "")
			require.NoError(t, err)
			require.Len(t, before, 1)
			infer(t, tc.c, 1)
			infer(t, tc.c, 4)
			infer(t, tc.c, 4)
			after, err := tc.c.ModelStatistics(ctx, "resnet18", "1")
			require.NoError(t, err)
			require.Len(t, after, 1)
			a, b := after[0], before[0]
			assert.Equal(t, "resnet18", a.Name)
			assert.Equal(t, "1", a.Version)
			assert.Equal(t, uint64(9), a.InferenceCount-b.InferenceCount, "images")
			assert.Equal(t, uint64(3), a.ExecutionCount-b.ExecutionCount, "batches")
			is, bs := a.InferenceStats, b.InferenceStats
			assert.Equal(t, uint64(3), is.Success.Count-bs.Success.Count)
			assert.Greater(t, is.Success.Ns, bs.Success.Ns, "time from arrival to answer")
			for name, d := range map[string][2]client.StatisticDuration{
				"queue": {bs.Queue, is.Queue}, "compute_input": {bs.ComputeInput, is.ComputeInput},
				"compute_infer": {bs.ComputeInfer, is.ComputeInfer}, "compute_output": {bs.ComputeOutput, is.ComputeOutput},
			} {
				assert.Equal(t, uint64(3), d[1].Count-d[0].Count, "%s counts each request once", name)
			}

			// The server's own Stats, read the same way.
			st := s.srv.Stats()
			assert.Equal(t, st.Items, a.InferenceCount)
			assert.Equal(t, st.Batches, a.ExecutionCount)
			assert.Equal(t, uint64(st.Stages[metrics.Compute].Sum), is.ComputeInfer.Ns)

			all, err := tc.c.ModelStatistics(ctx, "", "")
			require.NoError(t, err)
			require.Len(t, all, 1, "every model: this server has one")
			assert.Equal(t, "resnet18", all[0].Name)

			_, err = tc.c.ModelStatistics(ctx, "no-such-model", "")
			var e *client.Error
			require.ErrorAs(t, err, &e)
		})
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

func TestGRPCConnsSpreadInferOverConnections(t *testing.T) {
	s := serve(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	counted := &countingListener{Listener: ln}
	model, err := protocol.NewModel(s.srv, protocol.ModelConfig{})
	require.NoError(t, err)
	svc := protocol.New(model, protocol.Options{})
	gs := grpc.NewServer(svc.GRPCServerOptions(protocol.GRPCLimits{})...)
	svc.RegisterGRPC(gs)
	go gs.Serve(counted)
	t.Cleanup(func() { gs.Stop(); svc.Close() })

	for _, tc := range []struct {
		transport   string
		conns, want int32
	}{
		// grpc-go's connections carry Infer and, the first, every other
		// call: no new one for them.
		{client.TransportGRPCGo, 0, 1}, {client.TransportGRPCGo, 1, 1}, {client.TransportGRPCGo, 3, 3},
		// h2grpc's carry Infer; other calls open one grpc-go connection.
		{client.TransportH2, 0, 2}, {client.TransportH2, 1, 2}, {client.TransportH2, 3, 4},
	} {
		before := counted.accepted.Load()
		c, err := client.NewGRPC(ln.Addr().String(), client.GRPCOptions{Conns: int(tc.conns), Transport: tc.transport})
		require.NoError(t, err)
		for range 6 {
			infer(t, c, 1)
		}
		_, err = c.ServerMetadata(context.Background())
		require.NoError(t, err)
		require.NoError(t, c.Close())
		assert.Equal(t, tc.want, counted.accepted.Load()-before, "%s, Conns %d: connections the server accepted", tc.transport, tc.conns)
	}
}

// writeSizes records the size of every Write on a connection.
type writeSizes struct {
	net.Conn
	sizes chan<- int
}

func (c writeSizes) Write(b []byte) (int, error) {
	c.sizes <- len(b)
	return c.Conn.Write(b)
}

// Through grpc-go, a request that fits client.WriteBufferBytes leaves in
// one write: the server wakes for it once.
func TestGRPCSendsARequestInOneWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	const h, w = 250, 250 // 750 KB of FP32, more than gRPC's default buffers
	srv, err := inference.New(inference.Config{Options: inference.Options{Height: h, Width: w, MaxBatch: 1, Batches: []int{1}}, BackendName: "nop", Arch: resnet.Tiny()})
	require.NoError(t, err)
	model, err := protocol.NewModel(srv, protocol.ModelConfig{})
	require.NoError(t, err)
	svc := protocol.New(model, protocol.Options{})
	gs := grpc.NewServer(svc.GRPCServerOptions(protocol.GRPCLimits{})...)
	svc.RegisterGRPC(gs)
	go gs.Serve(ln)
	t.Cleanup(func() { gs.Stop(); svc.Close(); srv.Close() })

	sizes := make(chan int, 1<<16)
	dial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return writeSizes{Conn: c, sizes: sizes}, nil
	})
	c, err := client.NewGRPC(ln.Addr().String(), client.GRPCOptions{DialOptions: []grpc.DialOption{dial}, Transport: client.TransportGRPCGo})
	require.NoError(t, err)
	defer c.Close()
	in := make([]float32, 3*h*w)
	req := &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{client.FP32("input", []int64{1, 3, h, w}, in)}}
	_, err = c.Infer(context.Background(), req) // connects
	require.NoError(t, err)
	for len(sizes) > 0 {
		<-sizes
	}
	_, err = c.Infer(context.Background(), req)
	require.NoError(t, err)
	var writes []int
	for len(sizes) > 0 {
		writes = append(writes, <-sizes)
	}
	whole := 0
	for _, n := range writes {
		if n >= 4*len(in) {
			whole++
		}
	}
	assert.Equal(t, 1, whole, "writes holding the whole %d-byte tensor; sizes %v", 4*len(in), writes)
	assert.Less(t, 4*len(in), client.WriteBufferBytes, "the test's request must fit the buffer")
}

package h2grpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// echo is a GRPCInferenceService whose ModelInfer answers with the request's
// raw input reversed in bytes, and whose ModelStreamInfer answers each
// request with its id. A request named "slow" waits for its context.
type echo struct {
	v2pb.UnimplementedGRPCInferenceServiceServer
	cancelled chan struct{}
}

func (e *echo) ModelInfer(ctx context.Context, r *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	switch r.GetModelName() {
	case "slow":
		<-ctx.Done()
		if e.cancelled != nil {
			close(e.cancelled)
		}
		return nil, status.FromContextError(ctx.Err()).Err()
	case "fail":
		return nil, status.Error(codes.InvalidArgument, "bad request: 100% wrong, naïve")
	}
	var out [][]byte
	for _, raw := range r.GetRawInputContents() {
		rev := make([]byte, len(raw))
		for i, b := range raw {
			rev[len(raw)-1-i] = b
		}
		out = append(out, rev)
	}
	return &v2pb.ModelInferResponse{ModelName: r.GetModelName(), Id: r.GetId(), RawOutputContents: out}, nil
}

func (e *echo) ModelStreamInfer(s grpc.BidiStreamingServer[v2pb.ModelInferRequest, v2pb.ModelStreamInferResponse]) error {
	for {
		r, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(&v2pb.ModelStreamInferResponse{InferResponse: &v2pb.ModelInferResponse{Id: r.GetId()}}); err != nil {
			return err
		}
	}
}

// serve starts a Server with o on loopback; it stops with the test.
func serve(t *testing.T, o ServerOptions, impl v2pb.GRPCInferenceServiceServer) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := NewServer(o)
	v2pb.RegisterGRPCInferenceServiceServer(s, impl)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Stop()
		assert.ErrorIs(t, <-done, ErrServerStopped)
	})
	return s, ln.Addr().String()
}

// serveGRPCGo starts grpc-go's server with impl on loopback.
func serveGRPCGo(t *testing.T, impl v2pb.GRPCInferenceServiceServer, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer(opts...)
	v2pb.RegisterGRPCInferenceServiceServer(g, impl)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

func grpcGoClient(t *testing.T, addr string) v2pb.GRPCInferenceServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return v2pb.NewGRPCInferenceServiceClient(cc)
}

// pattern is n bytes that differ from their neighbours and from their
// reverse.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func reversed(b []byte) []byte {
	r := make([]byte, len(b))
	for i, x := range b {
		r[len(b)-1-i] = x
	}
	return r
}

const inferMethod = "/inference.GRPCInferenceService/ModelInfer"

// invoke calls ModelInfer through c, the raw input sent as its own part.
func invoke(ctx context.Context, c *Client, r *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	raws := r.RawInputContents
	r.RawInputContents = nil
	head, err := proto.Marshal(r)
	if err != nil {
		return nil, err
	}
	parts := [][]byte{head}
	for _, raw := range raws {
		parts = append(parts, append([]byte{7<<3 | 2}, uvarint(len(raw))...), raw)
	}
	b, err := c.Invoke(ctx, inferMethod, parts...)
	if err != nil {
		return nil, err
	}
	resp := &v2pb.ModelInferResponse{}
	return resp, proto.Unmarshal(b, resp)
}

func uvarint(n int) []byte {
	var b []byte
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}

func TestServerWithGRPCGoClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ServerOptions
		size int
	}{
		{"small", ServerOptions{}, 1000},
		{"large, default window", ServerOptions{MaxMessageBytes: 64 << 20}, 20 << 20},
		{"large, smallest window", ServerOptions{MaxMessageBytes: 64 << 20, StreamWindow: 64 << 10}, 5 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := serve(t, tc.opts, &echo{})
			api := grpcGoClient(t, addr)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			in := pattern(tc.size)
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Go(func() {
					resp, err := api.ModelInfer(ctx, &v2pb.ModelInferRequest{ModelName: "m", Id: string(rune('a' + i)), RawInputContents: [][]byte{in}})
					if assert.NoError(t, err) {
						assert.Equal(t, string(rune('a'+i)), resp.GetId())
						assert.True(t, bytes.Equal(reversed(in), resp.GetRawOutputContents()[0]), "echoed bytes differ")
					}
				})
			}
			wg.Wait()
		})
	}
}

func TestServerStatusAndStreams(t *testing.T) {
	_, addr := serve(t, ServerOptions{MaxMessageBytes: 1 << 20}, &echo{})
	api := grpcGoClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	_, err := api.ModelInfer(ctx, &v2pb.ModelInferRequest{ModelName: "fail"})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Equal(t, "bad request: 100% wrong, naïve", status.Convert(err).Message())

	_, err = api.ModelInfer(ctx, &v2pb.ModelInferRequest{ModelName: "big", RawInputContents: [][]byte{make([]byte, 2<<20)}})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)

	_, err = api.ServerLive(ctx, &v2pb.ServerLiveRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err))

	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	_, err = api.ModelInfer(short, &v2pb.ModelInferRequest{ModelName: "slow"})
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err))

	s, err := api.ModelStreamInfer(ctx)
	require.NoError(t, err)
	for _, id := range []string{"1", "2", "3"} {
		require.NoError(t, s.Send(&v2pb.ModelInferRequest{Id: id, RawInputContents: [][]byte{pattern(100 << 10)}}))
		r, err := s.Recv()
		require.NoError(t, err)
		assert.Equal(t, id, r.GetInferResponse().GetId())
	}
	require.NoError(t, s.CloseSend())
	_, err = s.Recv()
	assert.Equal(t, io.EOF, err)
}

func TestClient(t *testing.T) {
	servers := map[string]func(t *testing.T, impl *echo) string{
		"h2grpc": func(t *testing.T, impl *echo) string {
			_, addr := serve(t, ServerOptions{MaxMessageBytes: 64 << 20}, impl)
			return addr
		},
		"grpc-go": func(t *testing.T, impl *echo) string {
			return serveGRPCGo(t, impl, grpc.MaxRecvMsgSize(64<<20))
		},
	}
	for name, start := range servers {
		t.Run(name, func(t *testing.T) {
			impl := &echo{cancelled: make(chan struct{})}
			c := NewClient(start(t, impl), ClientOptions{MaxMessageBytes: 64 << 20})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, size := range []int{0, 1, 70000, 20 << 20} {
				in := pattern(size)
				resp, err := invoke(ctx, c, &v2pb.ModelInferRequest{ModelName: "m", Id: "x", RawInputContents: [][]byte{in}})
				require.NoError(t, err, "%d bytes", size)
				assert.True(t, bytes.Equal(reversed(in), resp.GetRawOutputContents()[0]), "%d bytes echoed wrong", size)
			}
			_, err := invoke(ctx, c, &v2pb.ModelInferRequest{ModelName: "fail"})
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Equal(t, "bad request: 100% wrong, naïve", status.Convert(err).Message())

			short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancelShort()
			_, err = invoke(short, c, &v2pb.ModelInferRequest{ModelName: "slow"})
			assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
			select {
			case <-impl.cancelled:
			case <-ctx.Done():
				t.Fatal("the handler's context was not cancelled")
			}

			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					in := pattern(1<<20 + i)
					resp, err := invoke(ctx, c, &v2pb.ModelInferRequest{ModelName: "m", RawInputContents: [][]byte{in}})
					if assert.NoError(t, err) {
						assert.True(t, bytes.Equal(reversed(in), resp.GetRawOutputContents()[0]))
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestServerRefusesNonGRPC sends plain HTTP/2 requests.
func TestServerRefusesNonGRPC(t *testing.T) {
	_, addr := serve(t, ServerOptions{}, &echo{})
	for _, tc := range []struct {
		method, contentType string
		want                int
	}{
		{http.MethodGet, "application/grpc", http.StatusMethodNotAllowed},
		{http.MethodPost, "application/json", http.StatusUnsupportedMediaType},
	} {
		req, err := http.NewRequest(tc.method, "http://"+addr+inferMethod, strings.NewReader(""))
		require.NoError(t, err)
		req.Header.Set("Content-Type", tc.contentType)
		resp, err := h2cClient().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, tc.want, resp.StatusCode, "%s %s", tc.method, tc.contentType)
	}
}

func h2cClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return new(net.Dialer).DialContext(ctx, network, addr)
		},
	}}
}

// The client opens no more calls at once than the server's
// SETTINGS_MAX_CONCURRENT_STREAMS allows: the others wait for a stream.
func TestClientKeepsToTheServersStreamLimit(t *testing.T) {
	impl := &gateEcho{open: make(chan struct{})}
	_, addr := serve(t, ServerOptions{MaxStreams: 2}, impl)
	c := NewClient(addr, ClientOptions{})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			_, err := invoke(ctx, c, &v2pb.ModelInferRequest{ModelName: "m"})
			errs <- err
		})
	}
	require.Eventually(t, func() bool { return impl.in.Load() == 2 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, int32(2), impl.in.Load(), "calls running at once")
	close(impl.open)
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "no call refused")
	}
	assert.Equal(t, int32(6), impl.done.Load())
}

// gateEcho's ModelInfer waits for open, counting the calls inside.
type gateEcho struct {
	v2pb.UnimplementedGRPCInferenceServiceServer
	open     chan struct{}
	in, done atomic.Int32
}

func (g *gateEcho) ModelInfer(ctx context.Context, r *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	g.in.Add(1)
	defer g.in.Add(-1)
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	g.done.Add(1)
	return &v2pb.ModelInferResponse{}, nil
}

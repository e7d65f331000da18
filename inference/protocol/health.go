package protocol

import (
	"context"
	"net/http"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// healthService is grpc.health.v1 computed from the Service's readiness at
// each call, so it can never disagree with ServerReady: SERVING exactly when
// Ready, for the overall server ("") and for the inference service by name.
type healthService struct {
	grpc_health_v1.UnimplementedHealthServer
	s *Service
	// poll is how often Watch re-reads readiness.
	poll time.Duration
}

func registerHealth(g grpc.ServiceRegistrar, s *Service) {
	grpc_health_v1.RegisterHealthServer(g, &healthService{s: s, poll: time.Second})
}

var inferenceServiceName = v2pb.GRPCInferenceService_ServiceDesc.ServiceName

func (h *healthService) status(service string) (grpc_health_v1.HealthCheckResponse_ServingStatus, error) {
	if service != "" && service != inferenceServiceName {
		return 0, status.Errorf(codes.NotFound, "unknown service %q (this server has %q)", service, inferenceServiceName)
	}
	if h.s.Ready() {
		return grpc_health_v1.HealthCheckResponse_SERVING, nil
	}
	return grpc_health_v1.HealthCheckResponse_NOT_SERVING, nil
}

func (h *healthService) Check(_ context.Context, r *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	st, err := h.status(r.GetService())
	if err != nil {
		return nil, err
	}
	return &grpc_health_v1.HealthCheckResponse{Status: st}, nil
}

func (h *healthService) List(context.Context, *grpc_health_v1.HealthListRequest) (*grpc_health_v1.HealthListResponse, error) {
	st, _ := h.status("")
	r := &grpc_health_v1.HealthCheckResponse{Status: st}
	return &grpc_health_v1.HealthListResponse{Statuses: map[string]*grpc_health_v1.HealthCheckResponse{"": r, inferenceServiceName: r}}, nil
}

// Watch sends the status now and again whenever it changes, until the
// caller leaves or the Service drains (after sending NOT_SERVING: an open
// Watch would otherwise hold up the grpc.Server's GracefulStop).
func (h *healthService) Watch(r *grpc_health_v1.HealthCheckRequest, stream grpc.ServerStreamingServer[grpc_health_v1.HealthCheckResponse]) error {
	st, err := h.status(r.GetService())
	if err != nil {
		return err
	}
	tick := time.NewTicker(h.poll)
	defer tick.Stop()
	last := grpc_health_v1.HealthCheckResponse_ServingStatus(-1)
	for {
		if st != last {
			if err := stream.Send(&grpc_health_v1.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		if last == grpc_health_v1.HealthCheckResponse_NOT_SERVING && h.s.Draining() {
			return nil
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-h.s.drained:
		case <-tick.C:
		}
		st, _ = h.status(r.GetService())
	}
}

// HealthHTTPHandler serves GET (or HEAD) /v2/health/live and
// /v2/health/ready as HTTPHandler does, and answers every other request
// 503 with Retry-After and Connection: close: for connections admitted
// only to be probed (connlimit's reserve) and for the metrics listener.
// It reads no request body.
func (s *Service) HealthHTTPHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v2/health/live":
			s.health(w, r, true)
		case "/v2/health/ready":
			s.health(w, r, s.Ready())
		default:
			w.Header().Set("Connection", "close")
			s.httpError(w, unavailable("inference: the server is at its connection limit; this connection serves only /v2/health/live and /v2/health/ready (retry later)"))
		}
	})
}

// HealthMethods are the gRPC methods a health-only server answers: the
// standard health check and the protocol's ServerLive and ServerReady.
var HealthMethods = []string{
	grpc_health_v1.Health_Check_FullMethodName,
	grpc_health_v1.Health_List_FullMethodName,
	v2pb.GRPCInferenceService_ServerLive_FullMethodName,
	v2pb.GRPCInferenceService_ServerReady_FullMethodName,
}

// Bounds of the health-only gRPC server: its requests are a few bytes.
const (
	healthMaxMessageBytes = 4 << 10
	healthMaxStreams      = 4
)

// NewHealthGRPCServer returns a grpc-go server of s's gRPC services that
// answers only HealthMethods: any other call ends at once, before its
// message is read, with UNAVAILABLE. It is for connections admitted only
// to be probed (connlimit's reserve), whichever server serves the rest.
// conns, if set, hears when its connections' calls begin and end, as
// GRPCLimits.Conns does.
func (s *Service) NewHealthGRPCServer(conns ConnTracker) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(healthMaxMessageBytes),
		grpc.MaxConcurrentStreams(healthMaxStreams),
		grpc.MaxHeaderListSize(grpcMaxHeaderBytes),
		grpc.ConnectionTimeout(grpcHandshakeTimeout),
		grpc.InTapHandle(healthOnly),
	}
	if conns != nil {
		opts = append(opts, grpc.StatsHandler(callTracker{conns}))
	}
	g := grpc.NewServer(opts...)
	s.RegisterGRPC(g)
	return g
}

// healthOnly refuses every call but HealthMethods.
func healthOnly(ctx context.Context, info *tap.Info) (context.Context, error) {
	if slices.Contains(HealthMethods, info.FullMethodName) {
		return ctx, nil
	}
	return ctx, status.Errorf(codes.Unavailable, "inference: the server is at its connection limit; this connection serves only health checks (%s refused, retry later)", info.FullMethodName)
}

package protocol

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/inferbench/inferbench/inference/protocol/v2pb"
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

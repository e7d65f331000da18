package h2grpc

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// TestOnIdleReportsCallsCrossingZero: OnIdle hears idle false when a
// connection's first call opens and idle true when its last ends, once
// each, with the connection the listener accepted.
func TestOnIdleReportsCallsCrossingZero(t *testing.T) {
	type event struct {
		addr string
		idle bool
	}
	events := make(chan event, 16)
	_, addr := serve(t, ServerOptions{OnIdle: func(c net.Conn, idle bool) {
		events <- event{c.RemoteAddr().String(), idle}
	}}, &echo{})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	api := v2pb.NewGRPCInferenceServiceClient(cc)
	ctx, cancel := context.WithCancel(context.Background())
	slow := make(chan error, 1)
	go func() {
		_, err := api.ModelInfer(ctx, &v2pb.ModelInferRequest{ModelName: "slow"})
		slow <- err
	}()
	busy := <-events
	assert.False(t, busy.idle, "the first call made the connection busy")
	_, err = api.ModelInfer(context.Background(), &v2pb.ModelInferRequest{ModelName: "m"})
	require.NoError(t, err, "a second call alongside reports nothing")
	cancel()
	require.Error(t, <-slow)
	idle := <-events
	assert.Equal(t, event{busy.addr, true}, idle, "the last call's end made it idle")
	assert.Empty(t, events)
}

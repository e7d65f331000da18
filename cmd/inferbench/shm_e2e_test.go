//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/client"
)

// TestDefaultServeMapsNoObjectOfAnotherProcess is the attack on `serve`
// with its default flags: a client registers, as system shared memory, a
// /dev/shm object of another process (mode 0600, this user), then asks for
// inference that reads it as input and writes logits into it. Over HTTP and
// gRPC, every step is refused and the object keeps its bytes.
func TestDefaultServeMapsNoObjectOfAnotherProcess(t *testing.T) {
	const side, classes = 32, 5
	name := fmt.Sprintf("victim-%d", os.Getpid())
	path := filepath.Join("/dev/shm", name)
	secret := bytes.Repeat([]byte("secret! "), (4*3*side*side+4*classes)/8+1)
	if err := os.WriteFile(path, secret, 0o600); err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.Remove(path)
	s := startServer(t, "-model", "tiny", "-size", fmt.Sprintf("%dx%d", side, side))

	hc, err := client.NewHTTP("http://"+s.http, client.HTTPOptions{})
	require.NoError(t, err)
	defer hc.Close()
	gc, err := client.NewGRPC(s.grpc, client.GRPCOptions{})
	require.NoError(t, err)
	defer gc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for transport, c := range map[string]interface {
		client.Client
		client.SharedMemory
	}{"http": hc, "grpc": gc} {
		md, err := c.ServerMetadata(ctx)
		require.NoError(t, err)
		assert.NotContains(t, md.Extensions, "system_shared_memory", transport)
		err = c.RegisterSystemSharedMemory(ctx, "v", "/"+name, 0, uint64(len(secret)))
		var ce *client.Error
		if assert.ErrorAs(t, err, &ce, transport) {
			assert.Contains(t, ce.Msg, "system shared memory is turned off on this server", transport)
			if transport == "http" {
				assert.Equal(t, http.StatusBadRequest, ce.HTTPStatus)
			}
		}
		_, err = c.Infer(ctx, &client.InferRequest{Model: "tiny",
			Inputs:        []client.Tensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 3, side, side}, Region: &client.Region{Name: "v", ByteSize: 4 * 3 * side * side}}},
			OutputRegions: map[string]client.Region{"logits": {Name: "v", Offset: 4 * 3 * side * side, ByteSize: 4 * classes}}})
		assert.ErrorContains(t, err, "shared memory is turned off on this server", transport)
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, secret, got, "the other process's object")
}

//go:build cuda && linux && cgo

package suite

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/client"
)

// cudaSHMClient is a client with both shared-memory APIs.
type cudaSHMClient interface {
	client.Client
	client.SharedMemory
	client.CudaSharedMemory
}

// TestCudaSharedMemoryAcrossProcesses starts `inferbench serve -backend
// cuda` as a separate process (the driver opens CUDA IPC handles of other
// processes only), puts images in this process's GPU memory
// (client.AllocCUDA), registers it and an output allocation as CUDA
// shared-memory regions over gRPC and HTTP, and checks that the logits the
// server writes there equal, bit for bit, its answers to the same images
// sent as raw tensor data and through system shared memory; FP32 and UINT8,
// batches of 1 and 4 (each run as a CUDA graph). It also checks the errors
// of bad registrations against the real driver, and logs them.
func TestCudaSharedMemoryAcrossProcesses(t *testing.T) {
	if err := gpuAvailable(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	const side, classes, n = 64, 5, 4
	bin := testServeBin(t)
	args := []string{"serve", "-log", "json", "-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-metrics-addr", "",
		"-backend", "cuda", "-model", "tiny", "-size", fmt.Sprintf("%dx%d", side, side), "-max-batch", fmt.Sprint(n), "-batches", "1," + fmt.Sprint(n),
		"-workers", "2", "-pipeline", "overlap", "-precision", "fp16", "-graphs", "-shm"}
	p, err := startServe(bin, args, os.Environ())
	require.NoError(t, err)
	defer func() { assert.NoError(t, p.stop()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	image := 4 * 3 * side * side
	in, err := client.AllocCUDA(0, 64+n*image) // the tensors 64 bytes in
	require.NoError(t, err)
	defer in.Close()
	out, err := client.AllocCUDA(0, 4*n*classes)
	require.NoError(t, err)
	defer out.Close()
	key := fmt.Sprintf("/inferbench-cudashm-test-%d", os.Getpid())
	sys, err := client.CreateSharedMemory(key, 4*n*classes)
	require.NoError(t, err)
	defer sys.Close()

	grpcC, err := client.NewGRPC(p.addrs["grpc"], client.GRPCOptions{})
	require.NoError(t, err)
	defer grpcC.Close()
	httpC, err := client.NewHTTP("http://"+p.addrs["http"], client.HTTPOptions{})
	require.NoError(t, err)
	defer httpC.Close()
	md, err := grpcC.ServerMetadata(ctx)
	require.NoError(t, err)
	assert.Contains(t, md.Extensions, "cuda_shared_memory")

	for name, c := range map[string]cudaSHMClient{"grpc": grpcC, "http": httpC} {
		t.Run(name, func(t *testing.T) {
			err := c.RegisterCudaSharedMemory(ctx, "cin", in.Handle(), 0, uint64(in.Size()))
			if err != nil && strings.Contains(err.Error(), "cuIpcOpenMemHandle") {
				t.Skipf("this machine does not let the server open a CUDA IPC handle: %v", err)
			}
			require.NoError(t, err)
			require.NoError(t, c.RegisterCudaSharedMemory(ctx, "cout", out.Handle(), 0, uint64(out.Size())))
			require.NoError(t, c.RegisterSystemSharedMemory(ctx, "sysout", key, 0, uint64(4*n*classes)))
			st, err := c.CudaSharedMemoryStatus(ctx, "")
			require.NoError(t, err)
			assert.Equal(t, []client.CudaSharedMemoryRegion{{Name: "cin", DeviceID: 0, ByteSize: uint64(in.Size())}, {Name: "cout", DeviceID: 0, ByteSize: uint64(out.Size())}}, st)

			for _, dt := range []string{"FP32", "UINT8"} {
				for _, b := range []int{1, n} {
					shape := []int64{int64(b), 3, side, side}
					data := make([]byte, b*image)
					if dt == "UINT8" {
						data = data[:b*image/4]
						rand.Read(data)
					} else {
						for i := 0; i < len(data); i += 4 {
							binary.LittleEndian.PutUint32(data[i:], math.Float32bits(float32(i%997)/500-1))
						}
					}
					require.NoError(t, in.Write(64, data))
					raw, err := c.Infer(ctx, &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{{Name: "input", Datatype: dt, Shape: shape, Data: data}}})
					require.NoError(t, err)
					want := logitBytes(t, raw)
					inRegion := &client.Region{Name: "cin", Offset: 64, ByteSize: int64(len(data))}
					_, err = c.Infer(ctx, &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{{Name: "input", Datatype: dt, Shape: shape, Region: inRegion}},
						OutputRegions: map[string]client.Region{"logits": {Name: "cout", ByteSize: int64(4 * b * classes)}}})
					require.NoError(t, err)
					got := make([]byte, 4*b*classes)
					require.NoError(t, out.Read(0, got))
					assert.Equal(t, want, got, "%s batch %d: CUDA shared memory in and out", dt, b)
					_, err = c.Infer(ctx, &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{{Name: "input", Datatype: dt, Shape: shape, Region: inRegion}},
						OutputRegions: map[string]client.Region{"logits": {Name: "sysout", ByteSize: int64(4 * b * classes)}}})
					require.NoError(t, err)
					assert.Equal(t, want, sys.Bytes()[:4*b*classes], "%s batch %d: CUDA shared memory in, system shared memory out", dt, b)
				}
			}

			garbage := make([]byte, 64)
			rand.Read(garbage)
			for _, bad := range []struct {
				what   string
				handle []byte
				device int64
				size   uint64
				msg    string
			}{
				{"a device the server does not run on", in.Handle(), 1, 8, "device 1 is not one this server runs on"},
				{"more than the allocation", in.Handle(), 0, uint64(in.Size()) + 1<<21, "the handle's allocation holds"},
				{"a handle of no allocation", garbage, 0, 8, "cuIpcOpenMemHandle"},
			} {
				err := c.RegisterCudaSharedMemory(ctx, "bad", bad.handle, bad.device, bad.size)
				require.Error(t, err, bad.what)
				t.Logf("registering %s: %v", bad.what, err)
				assert.ErrorContains(t, err, bad.msg, bad.what)
			}
			require.NoError(t, c.UnregisterCudaSharedMemory(ctx, ""))
			require.NoError(t, c.UnregisterSystemSharedMemory(ctx, ""))
			st, err = c.CudaSharedMemoryStatus(ctx, "")
			require.NoError(t, err)
			assert.Empty(t, st)
		})
	}
}

// logitBytes returns the answer's logits as the bytes it carried.
func logitBytes(t *testing.T, r *client.InferResponse) []byte {
	t.Helper()
	o, err := r.Output("logits")
	require.NoError(t, err)
	return o.Data
}

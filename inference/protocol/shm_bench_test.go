//go:build linux

package protocol_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/client"
)

// BenchmarkSharedMemory measures the shared-memory transports against the
// in-process call and plain gRPC in one run and one process, with the flags
// of BenchmarkTransport (-backend, -size, -batches, -clients, ...):
// transport=grpc-shm and http-shm send requests whose input lies in one
// registered /dev/shm region (read in place by the server; page-locked once
// on cuda) and whose logits go into each client's own output region, so
// only the JSON or protobuf header crosses the socket. Latency is from the
// client's send to its answer on the client's clock; req/s and samples/s
// over the run's wall time.
func BenchmarkSharedMemory(b *testing.B) {
	h, w, batches, f := benchSetup(b)
	for _, batch := range batches {
		for _, clients := range benchInts(b, *benchClients) {
			for _, transport := range []string{"inproc", "grpc", "grpc-shm", "http-shm"} {
				name := fmt.Sprintf("backend=%s/batch=%d/clients=%d/transport=%s", *benchBackend, batch, clients, transport)
				b.Run(name, func(b *testing.B) { f.runSHM(b, transport, batch, clients, h, w) })
			}
		}
	}
}

// shmObject creates a /dev/shm object of size bytes, removed at cleanup.
func shmObject(b *testing.B, name string, size int) *os.File {
	path := filepath.Join("/dev/shm", fmt.Sprintf("inferbench-bench-%d-%s", os.Getpid(), name))
	fd, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		b.Skipf("no /dev/shm: %v", err)
	}
	b.Cleanup(func() { fd.Close(); os.Remove(path) })
	if err := fd.Truncate(int64(size)); err != nil {
		b.Fatal(err)
	}
	return fd
}

func (f *benchFixture) runSHM(b *testing.B, transport string, batch, clients, h, w int) {
	ctx := context.Background()
	values := batch * 3 * h * w
	classes := f.srv.Classes()
	data := make([]float32, values)
	for i := range data {
		data[i] = float32(i%251) / 251
	}
	// The in-process caller uses the server's own input memory (pinned on
	// CUDA), as the shared-memory regions are page-locked at registration:
	// like for like.
	in, err := f.srv.AllocInput(batch)
	if err != nil {
		b.Fatal(err)
	}
	defer f.srv.FreeInput(in)
	copy(in.Data, data)
	req := &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{client.FP32("input", []int64{int64(batch), 3, int64(h), int64(w)}, data)}}
	shmReqs := make([]*client.InferRequest, clients)
	var api client.SharedMemory = f.grpcClient
	var infer client.Client = f.grpcClient
	if transport == "http-shm" {
		api, infer = f.httpClient, f.httpClient
	}
	if transport == "grpc-shm" || transport == "http-shm" {
		inObj := shmObject(b, "in", 4*values)
		raw := make([]byte, 0, 4*values)
		for _, v := range data {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
		if _, err := inObj.WriteAt(raw, 0); err != nil {
			b.Fatal(err)
		}
		outBytes := 4 * batch * classes
		shmObject(b, "out", clients*outBytes)
		key := fmt.Sprintf("/inferbench-bench-%d-", os.Getpid())
		if err := api.RegisterSystemSharedMemory(ctx, "bench-in", key+"in", 0, uint64(4*values)); err != nil {
			b.Fatal(err)
		}
		if err := api.RegisterSystemSharedMemory(ctx, "bench-out", key+"out", 0, uint64(clients*outBytes)); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { api.UnregisterSystemSharedMemory(ctx, "") })
		for c := range shmReqs {
			shmReqs[c] = &client.InferRequest{Model: "resnet18",
				Inputs: []client.Tensor{{Name: "input", Datatype: "FP32", Shape: []int64{int64(batch), 3, int64(h), int64(w)},
					Region: &client.Region{Name: "bench-in", ByteSize: int64(4 * values)}}},
				OutputRegions: map[string]client.Region{"logits": {Name: "bench-out", Offset: int64(c * outBytes), ByteSize: int64(outBytes)}}}
		}
	}
	out := make([][]float32, clients)
	send := func(c int) error {
		switch transport {
		case "inproc":
			call, err := f.srv.Submit(ctx, inference.Request{Input: in, Logits: out[c]})
			if err != nil {
				return err
			}
			return call.Err()
		case "grpc":
			_, err := f.grpcClient.Infer(ctx, req)
			return err
		}
		_, err := infer.Infer(ctx, shmReqs[c])
		return err
	}
	for c := range out {
		out[c] = make([]float32, batch*classes)
		if err := send(c); err != nil { // warm the connection
			b.Fatal(err)
		}
	}
	closedLoop(b, clients, batch, send)
}

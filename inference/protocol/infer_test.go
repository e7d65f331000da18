package protocol_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/internal/half"
	"github.com/inferbench/inferbench/inference/v2pb"
)

func bits(v []float32) []uint32 {
	b := make([]uint32, len(v))
	for i, f := range v {
		b[i] = math.Float32bits(f)
	}
	return b
}

func logitsOf(t *testing.T, r *client.InferResponse) []float32 {
	t.Helper()
	out, err := r.Output("logits")
	require.NoError(t, err)
	v, err := out.Float32s()
	require.NoError(t, err)
	return v
}

func TestLogitsOverEveryTransportEqualInProcessBitForBit(t *testing.T) {
	t.Run("sleeping", func(t *testing.T) { logitsOverEveryTransport(t, inference.Config{}) })
	// Workers and handlers that look for work and answers before they sleep
	// (Config.IdlePoll) answer the same.
	t.Run("idle-poll", func(t *testing.T) { logitsOverEveryTransport(t, inference.Config{IdlePoll: 500 * time.Microsecond}) })
}

func logitsOverEveryTransport(t *testing.T, cfg inference.Config) {
	f := newFixture(t, fixtureOpts{cfg: cfg})
	ctx := context.Background()
	for name, c := range f.clients(t) {
		for _, n := range []int{1, 3} {
			images := randomImages(uint64(n), n)
			want := f.inProcess(t, images)
			req := inferRequest(images)
			req.ID = "req-42"
			resp, err := c.Infer(ctx, req)
			require.NoError(t, err, name)
			assert.Equal(t, "req-42", resp.ID, "%s: id echoed", name)
			assert.Equal(t, "resnet18", resp.ModelName, name)
			assert.Equal(t, "1", resp.ModelVersion, name)
			out, err := resp.Output("logits")
			require.NoError(t, err)
			assert.Equal(t, []int64{int64(n), classes}, out.Shape, name)
			assert.Equal(t, "FP32", out.Datatype, name)
			assert.Equal(t, bits(want), bits(logitsOf(t, resp)), "%s batch %d: logits differ from in-process", name, n)
		}
	}
}

// A request above the size from which the gRPC codec copies its raw input
// with several goroutines (8 MiB) is answered as in process.
func TestLargeRequestsEqualInProcessBitForBit(t *testing.T) {
	const n = 704 // 704 x 3x32x32 FP32: 8.65 MB
	f := newFixture(t, fixtureOpts{cfg: inference.Config{Options: inference.Options{MaxBatch: n}}})
	images := randomImages(7, n)
	want := f.inProcess(t, images)
	clients := map[string]client.Client{
		"grpc": f.grpcClient(t), "grpc-stream": f.grpcClientWith(t, client.GRPCOptions{Stream: true}), "http-binary": f.httpClient(t, false),
		"grpc, grpc-go server": f.grpcGoClient(t, client.GRPCOptions{}), "grpc, grpc-go client": f.grpcClientWith(t, client.GRPCOptions{Transport: client.TransportGRPCGo}),
	}
	for name, c := range clients {
		resp, err := c.Infer(context.Background(), inferRequest(images))
		require.NoError(t, err, name)
		assert.Equal(t, bits(want), bits(logitsOf(t, resp)), "%s: logits differ from in-process", name)
	}
}

func TestGRPCTypedContentsAreAnsweredTyped(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	images := randomImages(9, 2)
	want := f.inProcess(t, images)
	resp, err := f.grpcClient(t).API().ModelInfer(context.Background(), &v2pb.ModelInferRequest{
		ModelName: "resnet18",
		Inputs: []*v2pb.ModelInferRequest_InferInputTensor{{
			Name: "input", Datatype: "FP32", Shape: []int64{2, 3, side, side},
			Contents: &v2pb.InferTensorContents{Fp32Contents: images},
		}},
	})
	require.NoError(t, err)
	assert.Empty(t, resp.GetRawOutputContents())
	require.Len(t, resp.GetOutputs(), 1)
	assert.Equal(t, bits(want), bits(resp.GetOutputs()[0].GetContents().GetFp32Contents()))
}

// fp16Tensor rounds images to half precision: the bytes to send and the
// float32 values the server must see.
func fp16Tensor(images []float32) ([]byte, []float32) {
	raw := make([]byte, 2*len(images))
	widened := make([]float32, len(images))
	for i, v := range images {
		h := half.FromFloat32(v)
		binary.LittleEndian.PutUint16(raw[2*i:], h)
		widened[i] = half.ToFloat32(h)
	}
	return raw, widened
}

// hostNormalised is torchvision's ToTensor then Normalize of NCHW bytes:
// img.float().div(255), then .sub(mean).div(std), each a float32 operation.
func hostNormalised(raw []byte, mean, std []float32) []float32 {
	plane := side * side
	out := make([]float32, len(raw))
	for i, v := range raw {
		c := (i / plane) % 3
		x := float32(v) / float32(255)
		x = x - mean[c]
		out[i] = x / std[c]
	}
	return out
}

func TestFP16AndUINT8InputsAreWidenedOnTheWayIn(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := context.Background()
	images := randomImages(5, 2)
	fp16, widened := fp16Tensor(images)
	u8 := make([]byte, len(images))
	for i := range u8 {
		u8[i] = byte(i * 7 % 256)
	}
	normalised := hostNormalised(u8, []float32{0.485, 0.456, 0.406}, []float32{0.229, 0.224, 0.225})
	shape := []int64{2, 3, side, side}
	cases := []struct {
		name   string
		tensor client.Tensor
		want   []float32
		json   bool // may also go as JSON numbers
	}{
		{"FP16", client.Tensor{Name: "input", Datatype: "FP16", Shape: shape, Data: fp16}, f.inProcess(t, widened), false},
		{"UINT8", client.Tensor{Name: "input", Datatype: "UINT8", Shape: shape, Data: u8}, f.inProcess(t, normalised), true},
	}
	for _, tc := range cases {
		for name, c := range f.clients(t) {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				resp, err := c.Infer(ctx, &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{tc.tensor}})
				if name == "http-json" && !tc.json {
					require.ErrorContains(t, err, "cannot be sent as JSON")
					return // the client refuses: FP16 has no JSON form
				}
				require.NoError(t, err)
				assert.Equal(t, bits(tc.want), bits(logitsOf(t, resp)))
			})
		}
	}
}

func TestMetadataAndHealthOverEveryTransport(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	ctx := context.Background()
	for name, c := range f.clients(t) {
		t.Run(name, func(t *testing.T) {
			live, err := c.Live(ctx)
			require.NoError(t, err)
			assert.True(t, live)
			ready, err := c.Ready(ctx)
			require.NoError(t, err)
			assert.True(t, ready)
			ready, err = c.ModelReady(ctx, "resnet18", "1")
			require.NoError(t, err)
			assert.True(t, ready)

			sm, err := c.ServerMetadata(ctx)
			require.NoError(t, err)
			assert.Equal(t, "inferbench", sm.Name)
			assert.Contains(t, sm.Extensions, "binary_tensor_data")

			mm, err := c.ModelMetadata(ctx, "resnet18", "")
			require.NoError(t, err)
			assert.Equal(t, &client.ModelMetadata{
				Name: "resnet18", Versions: []string{"1"}, Platform: "inferbench_resnet",
				Inputs:  []client.TensorMetadata{{Name: "input", Datatype: "FP32", Shape: []int64{-1, 3, side, side}}},
				Outputs: []client.TensorMetadata{{Name: "logits", Datatype: "FP32", Shape: []int64{-1, classes}}},
			}, mm)

			_, err = c.ModelMetadata(ctx, "resnet50", "")
			var ce *client.Error
			require.ErrorAs(t, err, &ce)
			assert.Contains(t, ce.Msg, `unknown model "resnet50"`)
			_, err = c.ModelMetadata(ctx, "resnet18", "7")
			require.ErrorAs(t, err, &ce)
			assert.Contains(t, ce.Msg, `unknown version "7"`)
		})
	}
}

func TestInProcessStatsCountWireRequests(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	before := f.srv.Stats()
	clients := f.clients(t)
	for _, c := range clients {
		_, err := c.Infer(context.Background(), inferRequest(randomImages(1, 1)))
		require.NoError(t, err)
	}
	after := f.srv.Stats()
	assert.Equal(t, before.Completed+uint64(len(clients)), after.Completed)
	assert.Equal(t, before.Accepted+uint64(len(clients)), after.Accepted)
	_ = inference.Stats{}
}

package protocol_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// givenParams are the configuration's parameters for the fixture's model,
// which the test gives the server (Config.Model).
const givenParams = `"parameters":{"architecture":{"string_value":"tiny"},"classes":{"string_value":"5"},` +
	`"weights":{"string_value":"given by the program (inference.Config.Model)"}}`

func TestModelConfigurationOverBothTransports(t *testing.T) {
	tests := []struct {
		name string
		cfg  inference.Config
		http string
		db   *v2pb.ModelDynamicBatching
	}{
		{name: "no dynamic batching", cfg: inference.Config{
			Options: inference.Options{MaxBatch: 8}},
			http: `{"name":"resnet18","platform":"inferbench_resnet","backend":"cpu","max_batch_size":8,` +
				`"input":[{"name":"input","data_type":"TYPE_FP32","format":"FORMAT_NCHW","dims":[3,32,32]}],` +
				`"output":[{"name":"logits","data_type":"TYPE_FP32","dims":[5]}],` + givenParams + `}`},
		{name: "dynamic batching", cfg: inference.Config{
			Options: inference.Options{MaxBatch: 4}, MaxQueueDelay: 1500 * time.Nanosecond, PreferredBatches: []int{2, 4}},
			http: `{"name":"resnet18","platform":"inferbench_resnet","backend":"cpu","max_batch_size":4,` +
				`"input":[{"name":"input","data_type":"TYPE_FP32","format":"FORMAT_NCHW","dims":[3,32,32]}],` +
				`"output":[{"name":"logits","data_type":"TYPE_FP32","dims":[5]}],` +
				`"dynamic_batching":{"preferred_batch_size":[2,4],"max_queue_delay_microseconds":2},` + givenParams + `}`,
			db: &v2pb.ModelDynamicBatching{PreferredBatchSize: []int32{2, 4}, MaxQueueDelayMicroseconds: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, fixtureOpts{cfg: tt.cfg})
			for _, path := range []string{"/v2/models/resnet18/config", "/v2/models/resnet18/versions/1/config"} {
				a := send(t, f.http.URL, rawRequest{method: http.MethodGet, path: path})
				assert.Equal(t, http.StatusOK, a.status, path)
				assert.JSONEq(t, tt.http, string(a.body), path)
			}
			r, err := f.grpcClient(t).API().ModelConfig(context.Background(), &v2pb.ModelConfigRequest{Name: "resnet18"})
			require.NoError(t, err)
			c := r.GetConfig()
			assert.Equal(t, "resnet18", c.GetName())
			assert.Equal(t, "inferbench_resnet", c.GetPlatform())
			assert.Equal(t, "cpu", c.GetBackend())
			assert.Equal(t, int32(tt.cfg.MaxBatch), c.GetMaxBatchSize())
			require.Len(t, c.GetInput(), 1)
			assert.Equal(t, v2pb.DataType_TYPE_FP32, c.GetInput()[0].GetDataType())
			assert.Equal(t, int32(11), int32(c.GetInput()[0].GetDataType()), "TYPE_FP32 is 11 in model_config.proto")
			assert.Equal(t, v2pb.ModelInput_FORMAT_NCHW, c.GetInput()[0].GetFormat())
			assert.Equal(t, []int64{3, side, side}, c.GetInput()[0].GetDims())
			require.Len(t, c.GetOutput(), 1)
			assert.Equal(t, []int64{classes}, c.GetOutput()[0].GetDims())
			assert.Equal(t, tt.db.GetPreferredBatchSize(), c.GetDynamicBatching().GetPreferredBatchSize())
			assert.Equal(t, tt.db.GetMaxQueueDelayMicroseconds(), c.GetDynamicBatching().GetMaxQueueDelayMicroseconds())
			assert.Equal(t, tt.db == nil, c.DynamicBatching == nil)

			a := send(t, f.http.URL, rawRequest{method: http.MethodGet, path: "/v2/models/resnet50/config"})
			assert.Equal(t, http.StatusNotFound, a.status)
			_, err = f.grpcClient(t).API().ModelConfig(context.Background(), &v2pb.ModelConfigRequest{Name: "resnet18", Version: "2"})
			assert.Equal(t, codes.NotFound, status.Code(err))
		})
	}
}

// TestModelConfigSaysWhatIsServed: the configuration's parameters name the
// architecture, the classes and the weights, a checkpoint or seeded random
// numbers, over HTTP and gRPC alike.
func TestModelConfigSaysWhatIsServed(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  inference.Config
		want map[string]string
	}{
		{"seeded", inference.Config{Arch: resnet.Tiny(), Seed: 7}, map[string]string{
			"architecture": "tiny", "classes": "5",
			"weights": "seeded random (torchvision initialisation, seed 7): logits are no classification"}},
		{"checkpoint", inference.Config{Checkpoint: filepath.Join("..", "..", "testdata", "reference", "s2_zip.pt")}, map[string]string{
			"architecture": "resnet(stem=8,widths=8-16,blocks=1-2,classes=5)", "classes": "5", "weights": "checkpoint s2_zip.pt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureOpts{cfg: tc.cfg})
			a := send(t, f.http.URL, rawRequest{method: http.MethodGet, path: "/v2/models/resnet18/config"})
			require.Equal(t, http.StatusOK, a.status)
			var j struct {
				Parameters map[string]struct {
					StringValue string `json:"string_value"`
				} `json:"parameters"`
			}
			require.NoError(t, json.Unmarshal(a.body, &j))
			got := map[string]string{}
			for k, v := range j.Parameters {
				got[k] = v.StringValue
			}
			assert.Equal(t, tc.want, got, "HTTP: %s", a.body)

			r, err := f.grpcClient(t).API().ModelConfig(context.Background(), &v2pb.ModelConfigRequest{Name: "resnet18"})
			require.NoError(t, err)
			got = map[string]string{}
			for k, v := range r.GetConfig().GetParameters() {
				got[k] = v.GetStringValue()
			}
			assert.Equal(t, tc.want, got, "gRPC")
		})
	}
}

func TestStatisticsAgreeWithStats(t *testing.T) {
	f := newFixture(t, fixtureOpts{cfg: inference.Config{RejectNonFinite: true}})
	ctx := context.Background()
	c := f.grpcClient(t)
	for _, n := range []int{1, 2, 3} {
		_, err := c.Infer(ctx, inferRequest(randomImages(uint64(n), n)))
		require.NoError(t, err)
	}
	bad := randomImages(4, 1)
	bad[7] = float32(math.NaN())
	_, err := c.Infer(ctx, inferRequest(bad))
	require.Error(t, err, "NaN input refused by the server")
	st := f.srv.Stats()
	require.Equal(t, uint64(3), st.Completed)
	require.Equal(t, uint64(1), st.Rejected)
	sum := func(i int) uint64 { return uint64(st.Stages[i].Sum) }
	latency := uint64(st.Latency.Sum)

	type dur struct {
		Count uint64  `json:"count"`
		Ns    *uint64 `json:"ns"`
	}
	var j struct {
		ModelStats []struct {
			Name           string         `json:"name"`
			Version        string         `json:"version"`
			InferenceCount uint64         `json:"inference_count"`
			ExecutionCount uint64         `json:"execution_count"`
			InferenceStats map[string]dur `json:"inference_stats"`
			BatchStats     []any          `json:"batch_stats"`
		} `json:"model_stats"`
	}
	for _, path := range []string{"/v2/models/resnet18/stats", "/v2/models/resnet18/versions/1/stats", "/v2/models/stats"} {
		a := send(t, f.http.URL, rawRequest{method: http.MethodGet, path: path})
		require.Equal(t, http.StatusOK, a.status, "%s: %s", path, a.body)
		dec := json.NewDecoder(bytes.NewReader(a.body))
		require.NoError(t, dec.Decode(&j))
		require.Len(t, j.ModelStats, 1, path)
		ms := j.ModelStats[0]
		assert.Equal(t, "resnet18", ms.Name)
		assert.Equal(t, "1", ms.Version)
		assert.Equal(t, st.Items, ms.InferenceCount, "%s: images", path)
		assert.Equal(t, st.Batches, ms.ExecutionCount, "%s: batches", path)
		is := ms.InferenceStats
		assert.Equal(t, uint64(3), is["success"].Count)
		assert.Equal(t, latency, *is["success"].Ns)
		assert.Equal(t, uint64(1), is["fail"].Count)
		assert.Nil(t, is["fail"].Ns, "failed requests' time is not measured: no ns")
		for i, k := range []string{"queue", "compute_input", "compute_infer", "compute_output"} {
			assert.Equal(t, uint64(3), is[k].Count, k)
			assert.Equal(t, sum(i), *is[k].Ns, k)
		}
	}
	r, err := c.API().ModelStatistics(ctx, &v2pb.ModelStatisticsRequest{})
	require.NoError(t, err)
	require.Len(t, r.GetModelStats(), 1)
	ms := r.GetModelStats()[0]
	assert.Equal(t, st.Items, ms.GetInferenceCount())
	assert.Equal(t, st.Batches, ms.GetExecutionCount())
	is := ms.GetInferenceStats()
	assert.Equal(t, latency, is.GetSuccess().GetNs())
	assert.Equal(t, uint64(1), is.GetFail().GetCount())
	assert.Equal(t, sum(2), is.GetComputeInfer().GetNs())
	_, err = c.API().ModelStatistics(ctx, &v2pb.ModelStatisticsRequest{Name: "resnet50"})
	assert.Equal(t, codes.NotFound, status.Code(err))
}

func TestServerMetadataReportsTheExtensions(t *testing.T) {
	f := newFixture(t, shmOn()) // the extensions of a server with shared memory on
	for name, c := range f.clients(t) {
		md, err := c.ServerMetadata(context.Background())
		require.NoError(t, err)
		assert.Equal(t, []string{"binary_tensor_data", "model_configuration", "statistics", "system_shared_memory"}, md.Extensions, name)
	}
}

package protocol

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// Triton's model configuration and statistics extensions
// (extension_model_configuration.md, extension_statistics.md), enough for
// perf_analyzer's Triton mode: it reads max_batch_size, the inputs and the
// dynamic batcher from the configuration, and differences two statistics
// snapshots for its server-side breakdown.

// backendName names the engine behind the model: cpu, cuda or nop.
func (m *Model) backendName() string {
	cfg := m.srv.Config()
	switch {
	case cfg.Backend != nil:
		return cfg.Backend.Name()
	case cfg.BackendName != "":
		return cfg.BackendName
	}
	return "cpu"
}

// config is the model's configuration as model_config.proto's ModelConfig:
// its name, platform and back-end, the largest batch, the one FP32 NCHW input
// and one FP32 output (dims without the batch dimension, as Triton gives them
// when max_batch_size > 0), dynamic_batching when the server merges
// requests (Config.MaxQueueDelay > 0), with its preferred sizes and delay
// rounded up to whole microseconds, and the parameters that say what is
// served: architecture (resnet.Arch.Name), classes, and weights
// (Server.Weights: a checkpoint, or seeded random numbers).
func (m *Model) config() *v2pb.ModelConfig {
	param := func(v string) *v2pb.ModelParameter { return &v2pb.ModelParameter{StringValue: v} }
	c := &v2pb.ModelConfig{
		Name: m.name, Platform: Platform, Backend: m.backendName(), MaxBatchSize: int32(m.maxBatch),
		Input: []*v2pb.ModelInput{{Name: InputName, DataType: v2pb.DataType_TYPE_FP32, Format: v2pb.ModelInput_FORMAT_NCHW,
			Dims: []int64{int64(m.channels), int64(m.height), int64(m.width)}}},
		Output: []*v2pb.ModelOutput{{Name: OutputName, DataType: v2pb.DataType_TYPE_FP32, Dims: []int64{int64(m.classes)}}},
		Parameters: map[string]*v2pb.ModelParameter{
			"architecture": param(m.srv.Arch().Name()),
			"classes":      param(strconv.Itoa(m.classes)),
			"weights":      param(m.srv.Weights()),
		},
	}
	sc := m.srv.Config()
	if sc.MaxQueueDelay > 0 {
		db := &v2pb.ModelDynamicBatching{MaxQueueDelayMicroseconds: uint64((sc.MaxQueueDelay + time.Microsecond - 1) / time.Microsecond)}
		for _, b := range sc.PreferredBatches {
			db.PreferredBatchSize = append(db.PreferredBatchSize, int32(b))
		}
		c.DynamicBatching = db
	}
	return c
}

// The JSON form of the configuration, with the names and enum names of
// model_config.proto and numbers as JSON numbers (as Triton writes them).
type modelConfigJSON struct {
	Name            string               `json:"name"`
	Platform        string               `json:"platform"`
	Backend         string               `json:"backend"`
	MaxBatchSize    int32                `json:"max_batch_size"`
	Input           []modelInputJSON     `json:"input"`
	Output          []modelOutputJSON    `json:"output"`
	DynamicBatching *dynamicBatchingJSON `json:"dynamic_batching,omitempty"`
	Parameters      map[string]paramJSON `json:"parameters,omitempty"`
}

type paramJSON struct {
	StringValue string `json:"string_value"`
}

type modelInputJSON struct {
	Name     string  `json:"name"`
	DataType string  `json:"data_type"`
	Format   string  `json:"format"`
	Dims     []int64 `json:"dims"`
}

type modelOutputJSON struct {
	Name     string  `json:"name"`
	DataType string  `json:"data_type"`
	Dims     []int64 `json:"dims"`
}

type dynamicBatchingJSON struct {
	PreferredBatchSize        []int32 `json:"preferred_batch_size"`
	MaxQueueDelayMicroseconds uint64  `json:"max_queue_delay_microseconds"`
}

func configJSON(c *v2pb.ModelConfig) modelConfigJSON {
	j := modelConfigJSON{Name: c.GetName(), Platform: c.GetPlatform(), Backend: c.GetBackend(), MaxBatchSize: c.GetMaxBatchSize()}
	for _, in := range c.GetInput() {
		j.Input = append(j.Input, modelInputJSON{Name: in.GetName(), DataType: in.GetDataType().String(), Format: in.GetFormat().String(), Dims: in.GetDims()})
	}
	for _, out := range c.GetOutput() {
		j.Output = append(j.Output, modelOutputJSON{Name: out.GetName(), DataType: out.GetDataType().String(), Dims: out.GetDims()})
	}
	for k, p := range c.GetParameters() {
		if j.Parameters == nil {
			j.Parameters = map[string]paramJSON{}
		}
		j.Parameters[k] = paramJSON{StringValue: p.GetStringValue()}
	}
	if db := c.GetDynamicBatching(); db != nil {
		j.DynamicBatching = &dynamicBatchingJSON{PreferredBatchSize: db.GetPreferredBatchSize(), MaxQueueDelayMicroseconds: db.GetMaxQueueDelayMicroseconds()}
		if j.DynamicBatching.PreferredBatchSize == nil {
			j.DynamicBatching.PreferredBatchSize = []int32{}
		}
	}
	return j
}

// statistics is the model's ModelStatistics, read from Server.Stats at the
// call, so its counts are Stats' at that moment:
//
//	inference_count                 images in executed batches (Stats.Items)
//	execution_count                 executed batches (Stats.Batches)
//	inference_stats.success         requests answered with logits and their cumulative latency from
//	                                arrival to logits on the host (server clock), as the
//	                                nv_inference_request_duration_us metric
//	inference_stats.fail            count only: requests refused or answered with an error (Stats.Rejected,
//	                                Failed, Cancelled, Expired); their durations are not measured
//	inference_stats.queue           the successful requests' cumulative wait for a worker
//	inference_stats.compute_input   ... copy-in, compute and copy-out of their batches (device-timed on
//	compute_infer, compute_output   a GPU), each counted once per request, as in Triton
//
// last_inference, batch_stats and the cache figures are not measured and left
// out (absent in JSON; unset, so also absent on the wire, in protobuf).
// Every figure is cumulative since the server started and only grows, as
// Triton's do.
func (m *Model) statistics() *v2pb.ModelStatistics {
	st := m.srv.Stats()
	lat := latencyOf(st)
	dur := func(count uint64, d time.Duration) *v2pb.StatisticDuration {
		return &v2pb.StatisticDuration{Count: count, Ns: uint64(d)}
	}
	return &v2pb.ModelStatistics{
		Name: m.name, Version: m.version, InferenceCount: st.Items, ExecutionCount: st.Batches,
		InferenceStats: &v2pb.InferStatistics{
			Success:       dur(lat.count, lat.sum),
			Fail:          &v2pb.StatisticDuration{Count: st.Rejected + st.Failed + st.Cancelled + st.Expired},
			Queue:         dur(lat.count, lat.stages[0]),
			ComputeInput:  dur(lat.count, lat.stages[1]),
			ComputeInfer:  dur(lat.count, lat.stages[2]),
			ComputeOutput: dur(lat.count, lat.stages[3]),
		},
	}
}

// The JSON form of the statistics ($stats_model_response).
type durationJSON struct {
	Count uint64  `json:"count"`
	Ns    *uint64 `json:"ns,omitempty"` // nil: not measured
}

type inferStatsJSON struct {
	Success       durationJSON `json:"success"`
	Fail          durationJSON `json:"fail"`
	Queue         durationJSON `json:"queue"`
	ComputeInput  durationJSON `json:"compute_input"`
	ComputeInfer  durationJSON `json:"compute_infer"`
	ComputeOutput durationJSON `json:"compute_output"`
}

type modelStatJSON struct {
	Name           string         `json:"name"`
	Version        string         `json:"version"`
	InferenceCount uint64         `json:"inference_count"`
	ExecutionCount uint64         `json:"execution_count"`
	InferenceStats inferStatsJSON `json:"inference_stats"`
	BatchStats     []struct{}     `json:"batch_stats"`
}

func statsJSON(s *v2pb.ModelStatistics) modelStatJSON {
	d := func(x *v2pb.StatisticDuration) durationJSON {
		ns := x.GetNs()
		return durationJSON{Count: x.GetCount(), Ns: &ns}
	}
	is := s.GetInferenceStats()
	return modelStatJSON{
		Name: s.GetName(), Version: s.GetVersion(), InferenceCount: s.GetInferenceCount(), ExecutionCount: s.GetExecutionCount(),
		InferenceStats: inferStatsJSON{
			Success: d(is.GetSuccess()), Fail: durationJSON{Count: is.GetFail().GetCount()}, Queue: d(is.GetQueue()),
			ComputeInput: d(is.GetComputeInput()), ComputeInfer: d(is.GetComputeInfer()), ComputeOutput: d(is.GetComputeOutput()),
		},
		BatchStats: []struct{}{},
	}
}

// serveStats answers GET /v2/models[/{name}[/versions/{version}]]/stats;
// name "" means every model (this server has one).
func (s *Service) serveStats(w http.ResponseWriter, r *http.Request, name, version string) {
	m := s.model
	if name != "" {
		var err error
		if m, err = s.lookup(name, version); err != nil {
			s.httpError(w, err)
			return
		}
	}
	s.get(w, r, func() any {
		return map[string]any{"model_stats": []modelStatJSON{statsJSON(m.statistics())}}
	})
}

func (g grpcService) ModelConfig(_ context.Context, r *v2pb.ModelConfigRequest) (*v2pb.ModelConfigResponse, error) {
	m, err := g.s.lookup(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	return &v2pb.ModelConfigResponse{Config: m.config()}, nil
}

// ModelStatistics answers for the named model, or for every model (this
// server's one) when the name is empty.
func (g grpcService) ModelStatistics(_ context.Context, r *v2pb.ModelStatisticsRequest) (*v2pb.ModelStatisticsResponse, error) {
	m := g.s.model
	if r.GetName() != "" || r.GetVersion() != "" {
		var err error
		if m, err = g.s.lookup(r.GetName(), r.GetVersion()); err != nil {
			return nil, g.s.grpcError(err)
		}
	}
	return &v2pb.ModelStatisticsResponse{ModelStats: []*v2pb.ModelStatistics{m.statistics()}}, nil
}

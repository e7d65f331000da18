package client

import (
	"context"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// StatisticDuration is a count and the cumulative time of what it counts, in
// nanoseconds (Triton's StatisticDuration).
type StatisticDuration struct {
	Count uint64 `json:"count"`
	Ns    uint64 `json:"ns"`
}

// InferStatistics are a model's cumulative request figures, as Triton's
// statistics extension defines them: Success and Fail count requests (with
// their time from arrival to answer); Queue, ComputeInput, ComputeInfer and
// ComputeOutput are the successful requests' time waiting for an instance,
// copying in, computing and copying out.
type InferStatistics struct {
	Success       StatisticDuration `json:"success"`
	Fail          StatisticDuration `json:"fail"`
	Queue         StatisticDuration `json:"queue"`
	ComputeInput  StatisticDuration `json:"compute_input"`
	ComputeInfer  StatisticDuration `json:"compute_infer"`
	ComputeOutput StatisticDuration `json:"compute_output"`
}

// ModelStatistics is one model version's statistics. Every figure is
// cumulative since the server loaded the model: the difference of two
// snapshots covers the interval between them. InferenceCount counts images
// (batch elements) executed, ExecutionCount the batches that executed them.
type ModelStatistics struct {
	Name           string          `json:"name"`
	Version        string          `json:"version"`
	LastInference  uint64          `json:"last_inference"` // ms since the epoch; 0: none yet or not reported
	InferenceCount uint64          `json:"inference_count"`
	ExecutionCount uint64          `json:"execution_count"`
	InferenceStats InferStatistics `json:"inference_stats"`
}

// Statistics is Triton's statistics extension, which both clients offer.
type Statistics interface {
	// ModelStatistics returns the statistics of model ("" version: every
	// version), or of every model when model is "".
	ModelStatistics(ctx context.Context, model, version string) ([]ModelStatistics, error)
}

var (
	_ Statistics = (*HTTPClient)(nil)
	_ Statistics = (*GRPCClient)(nil)
)

// ModelStatistics GETs /v2/models[/{model}[/versions/{version}]]/stats.
func (c *HTTPClient) ModelStatistics(ctx context.Context, model, version string) ([]ModelStatistics, error) {
	path := "/v2/models/stats"
	if model != "" {
		path = modelPath(model, version) + "/stats"
	}
	var out struct {
		ModelStats []ModelStatistics `json:"model_stats"`
	}
	if err := c.getJSON(ctx, path, &out); err != nil {
		return nil, err
	}
	return out.ModelStats, nil
}

// ModelStatistics calls the ModelStatistics method.
func (c *GRPCClient) ModelStatistics(ctx context.Context, model, version string) ([]ModelStatistics, error) {
	r, err := c.API().ModelStatistics(ctx, &v2pb.ModelStatisticsRequest{Name: model, Version: version})
	if err != nil {
		return nil, grpcErr(err)
	}
	d := func(x *v2pb.StatisticDuration) StatisticDuration {
		return StatisticDuration{Count: x.GetCount(), Ns: x.GetNs()}
	}
	var out []ModelStatistics
	for _, s := range r.GetModelStats() {
		is := s.GetInferenceStats()
		out = append(out, ModelStatistics{
			Name: s.GetName(), Version: s.GetVersion(), LastInference: s.GetLastInference(),
			InferenceCount: s.GetInferenceCount(), ExecutionCount: s.GetExecutionCount(),
			InferenceStats: InferStatistics{
				Success: d(is.GetSuccess()), Fail: d(is.GetFail()), Queue: d(is.GetQueue()),
				ComputeInput: d(is.GetComputeInput()), ComputeInfer: d(is.GetComputeInfer()), ComputeOutput: d(is.GetComputeOutput()),
			},
		})
	}
	return out, nil
}

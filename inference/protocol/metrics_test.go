package protocol_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
)

// gather scrapes the collector into name -> label string -> metric.
func gather(t *testing.T, c prometheus.Collector) map[string]map[string]*dto.Metric {
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]map[string]*dto.Metric{}
	for _, f := range families {
		out[f.GetName()] = map[string]*dto.Metric{}
		for _, m := range f.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				if l.GetName() != "model" && l.GetName() != "version" {
					key += l.GetName() + "=" + l.GetValue() + ","
				}
				if l.GetName() == "model" {
					assert.Equal(t, "resnet18", l.GetValue())
				}
				if l.GetName() == "version" {
					assert.Equal(t, "1", l.GetValue())
				}
			}
			out[f.GetName()][key] = m
		}
	}
	return out
}

func TestMetricsAgreeWithStatsExactly(t *testing.T) {
	f := newFixture(t, fixtureOpts{gated: true, cfg: inference.Config{MaxQueue: 1, QueuePolicy: inference.Reject}})
	ctx := context.Background()
	hc := f.httpClient(t, false)
	// Outcomes: completed (batches of 1 and 3), rejected (bad input at the
	// server, queue full), expired (a deadline while queued).
	f.gate.release()
	for _, n := range []int{1, 3, 1} {
		_, err := hc.Infer(ctx, inferRequest(randomImages(uint64(n), n)))
		require.NoError(t, err)
	}
	bad := inference.Tensor{Shape: []int{1, 3, side, side}, Data: make([]float32, 5)}
	_, err := f.srv.Infer(ctx, bad)
	require.Error(t, err)
	a := send(t, f.http.URL, rawRequest{path: "/v2/models/resnet18/infer", body: jsonInfer("input", "FP32", []int64{1, 3, 40, side}, []float32{1}, "")})
	assert.Equal(t, http.StatusBadRequest, a.status)
	dctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	_, err = f.srv.Infer(dctx, inference.Tensor{Shape: []int{1, 3, side, side}, Data: randomImages(1, 1)})
	cancel()
	require.Error(t, err)

	require.Eventually(t, func() bool { return f.srv.Stats().Queued == 0 }, 5*time.Second, time.Millisecond)
	st := f.srv.Stats()
	got := gather(t, f.svc.Collector())
	value := func(name, key string) float64 {
		m, ok := got[name][key]
		require.True(t, ok, "metric %s{%s} missing", name, key)
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	assert.Equal(t, float64(st.Completed), value("nv_inference_request_success", ""))
	assert.Equal(t, float64(3), value("nv_inference_request_success", ""), "three requests; the first inference is not one")
	assert.Equal(t, float64(st.Rejected), value("nv_inference_request_failure", "reason=REJECTED,"))
	assert.Equal(t, float64(st.Cancelled), value("nv_inference_request_failure", "reason=CANCELED,"))
	assert.Equal(t, float64(st.Failed), value("nv_inference_request_failure", "reason=BACKEND,"))
	assert.Equal(t, float64(st.Expired), value("nv_inference_request_failure", "reason=OTHER,"))
	assert.Equal(t, float64(st.Items), value("nv_inference_count", ""))
	assert.Equal(t, float64(st.Batches), value("nv_inference_exec_count", ""))
	assert.Equal(t, float64(st.Queued), value("nv_inference_pending_request_count", ""))
	assert.Equal(t, float64(1), value("inferbench_frontdoor_errors_total", "code=400,protocol=http,"))

	h := got["inferbench_request_duration_seconds"][""].GetHistogram()
	require.NotNil(t, h)
	assert.Equal(t, st.Completed, h.GetSampleCount())
	assert.InDelta(t, value("nv_inference_request_duration_us", "")/1e6, h.GetSampleSum(), 1e-9)
	for name, stage := range map[string]int{
		"nv_inference_queue_duration_us": 0, "nv_inference_compute_input_duration_us": 1,
		"nv_inference_compute_infer_duration_us": 2, "nv_inference_compute_output_duration_us": 3,
	} {
		assert.InDelta(t, float64(st.Stages[stage].Sum)/1e3, value(name, ""), 1e-6, name)
	}
}

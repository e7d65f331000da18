package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/resnet"
)

// slowBackend is nop whose every batch takes computeTime (time.Sleep: in
// a synctest bubble, on the fake clock).
type slowBackend struct{ computeTime time.Duration }

func (slowBackend) Name() string { return "slow" }

func (b slowBackend) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	e, err := nop.New().Open(m, opts)
	if err != nil {
		return nil, err
	}
	ws := e.Workers()
	for i, w := range ws {
		ws[i] = slowWorker{Worker: w, d: b.computeTime}
	}
	return e, nil
}

type slowWorker struct {
	backend.Worker
	d time.Duration
}

func (w slowWorker) Compute(s, n int) error {
	time.Sleep(w.d)
	return w.Worker.Compute(s, n)
}

// TestDefaultsAnswerEveryRequestInBoundedTime (issue 35, item 5): with
// serve's default queue policy and timeout, an open loop at 4 times what
// the server can compute gets every request answered (200, 503 with
// Retry-After, or 504) within -timeout plus one batch's compute time of its
// arrival; none is left waiting. Time is synctest's fake clock, so the two
// simulated minutes take a moment.
func TestDefaultsAnswerEveryRequestInBoundedTime(t *testing.T) {
	const (
		compute  = time.Second // one batch-1 request a second: the capacity
		interval = compute / 4 // 4x overload
		requests = 480         // two minutes of arrivals
	)
	synctest.Test(t, func(t *testing.T) {
		f, err := parseServe([]string{"-model", "tiny", "-size", "32x32", "-max-batch", "4"}, io.Discard)
		require.NoError(t, err)
		cfg, err := f.config()
		require.NoError(t, err)
		cfg.Backend = slowBackend{computeTime: compute}
		srv, err := inference.New(cfg)
		require.NoError(t, err)
		model, err := protocol.NewModel(srv, protocol.ModelConfig{Name: "resnet18", Version: "1", InflightBytes: f.inflightBytes})
		require.NoError(t, err)
		svc := protocol.New(model, protocol.Options{})
		h := svc.HTTPHandler()

		body, err := json.Marshal(map[string]any{"inputs": []map[string]any{{
			"name": "input", "datatype": "FP32", "shape": []int{1, 3, 32, 32}, "data": make([]float32, 3*32*32),
		}}})
		require.NoError(t, err)
		type answer struct {
			status     int
			retryAfter string
			took       time.Duration
		}
		answers := make([]answer, requests)
		var wg sync.WaitGroup
		for i := range requests {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v2/models/resnet18/infer", bytes.NewReader(body)))
				answers[i] = answer{rec.Code, rec.Header().Get("Retry-After"), time.Since(start)}
			}()
			time.Sleep(interval)
		}
		wg.Wait() // a request left waiting for ever deadlocks the bubble: a failure

		bound := f.cfg.Timeout + compute
		counts := map[int]int{}
		var longest time.Duration
		for i, a := range answers {
			counts[a.status]++
			longest = max(longest, a.took)
			assert.Contains(t, []int{http.StatusOK, http.StatusServiceUnavailable, http.StatusGatewayTimeout}, a.status, "request %d", i)
			if a.status == http.StatusServiceUnavailable {
				assert.NotEmpty(t, a.retryAfter, "request %d: 503 without Retry-After", i)
			}
		}
		t.Logf("answers by status: %v; longest %v (bound %v)", counts, longest, bound)
		assert.LessOrEqual(t, longest, bound, "every request answered within -timeout plus one batch")
		assert.Positive(t, counts[http.StatusOK])
		assert.Positive(t, counts[http.StatusGatewayTimeout]+counts[http.StatusServiceUnavailable], "the load was an overload")
		svc.Drain()
		require.NoError(t, svc.Close())
		require.NoError(t, srv.Close())
	})
}

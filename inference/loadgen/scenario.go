package loadgen

import (
	"fmt"
	"time"
)

// Scenario is one of the test scenarios of MLPerf Inference's LoadGen
// (mlcommons/inference, loadgen/test_settings.h), mapped onto this package's
// modes. A query is one request; its samples are the request's images.
type Scenario int

const (
	// SingleStream sends queries of one sample, the next once the previous
	// has completed (Closed load, one outstanding request). Its result is the
	// 90th-percentile latency.
	SingleStream Scenario = iota
	// MultiStream sends queries of MultiStreamSamples samples, the next once
	// the previous has completed (Closed load, one outstanding request). A
	// query's latency is that of its slowest sample: here the whole request.
	// Its result is the 99th-percentile query latency.
	MultiStream
	// Server sends queries of one sample with Poisson arrivals at a target
	// rate, however many are outstanding (Open load). Its result is VALID if
	// the 99th-percentile latency is within the latency bound, INVALID
	// otherwise.
	Server
	// Offline sends every query at once (Burst load); the server batches as
	// it likes. Its result is samples per second.
	Offline
)

// MultiStreamSamples is LoadGen's multi_stream_samples_per_query.
const MultiStreamSamples = 8

var scenarioNames = [...]string{"SingleStream", "MultiStream", "Server", "Offline"}

// String returns LoadGen's name: "SingleStream", "MultiStream", "Server" or
// "Offline".
func (s Scenario) String() string {
	if s >= 0 && int(s) < len(scenarioNames) {
		return scenarioNames[s]
	}
	return fmt.Sprintf("Scenario(%d)", int(s))
}

// ParseScenario is the inverse of Scenario.String.
func ParseScenario(name string) (Scenario, error) {
	for i, n := range scenarioNames {
		if n == name {
			return Scenario(i), nil
		}
	}
	return 0, fmt.Errorf("loadgen: unknown scenario %q (want SingleStream, MultiStream, Server or Offline)", name)
}

// Samples returns the samples per query the scenario fixes (1 for
// SingleStream and Server, MultiStreamSamples for MultiStream), or 0 for
// Offline, where the caller chooses the request size.
func (s Scenario) Samples() int {
	switch s {
	case SingleStream, Server:
		return 1
	case MultiStream:
		return MultiStreamSamples
	}
	return 0
}

// Load returns the load that runs the scenario: rate and seed apply to
// Server only.
func (s Scenario) Load(rate float64, seed uint64) Spec {
	switch s {
	case SingleStream, MultiStream:
		return Spec{Mode: Closed, Concurrency: 1}
	case Server:
		return Spec{Mode: Open, Rate: rate, Poisson: true, Seed: seed}
	}
	return Spec{Mode: Burst}
}

// Bound is a latency constraint: the Quantile latency must not exceed
// Latency. LoadGen's Server scenario holds the 99th percentile to a bound set
// per model (server_target_latency_ns).
type Bound struct {
	Quantile float64
	Latency  time.Duration
}

// Outcome is a scenario's result, as LoadGen states it.
type Outcome struct {
	Scenario Scenario
	// Quantile and Latency are the latency percentile the scenario reports
	// (0.9 for SingleStream; 0.99 for MultiStream; the bound's for Server),
	// or 0 for Offline.
	Quantile float64
	Latency  time.Duration
	// Throughput is completed samples per second over the window.
	Throughput float64
	// Judged is true for the scenario with a verdict (Server); Valid is the
	// verdict: the bound was met and no query failed.
	Judged, Valid bool
}

// Verdict returns "VALID" or "INVALID" for a judged outcome, "" otherwise.
func (o Outcome) Verdict() string {
	switch {
	case !o.Judged:
		return ""
	case o.Valid:
		return "VALID"
	}
	return "INVALID"
}

// Judge returns the scenario's outcome from what was measured in w, with
// samples images per query and, for Server, the latency bound. LoadGen also
// requires a minimum run length (600 s and a minimum query count in its
// mlperf.conf) and applies early stopping; Judge does neither: it judges the
// run it is given.
func (s Scenario) Judge(w *Window, samples int, bound Bound) Outcome {
	o := Outcome{Scenario: s, Throughput: w.Throughput(samples)}
	switch s {
	case SingleStream:
		o.Quantile = 0.9
	case MultiStream:
		o.Quantile = 0.99
	case Server:
		o.Quantile, o.Judged = bound.Quantile, true
	}
	if o.Quantile > 0 {
		o.Latency = w.Latency.Quantile(o.Quantile)
	}
	if o.Judged {
		o.Valid = w.Failed == 0 && w.Completed > 0 && o.Latency <= bound.Latency
	}
	return o
}

// Window returns r as one window: from its first send to its last response.
func (r *Result) Window() Window {
	return Window{Start: r.FirstSend, End: r.LastDone, Elapsed: r.Elapsed(), Completed: r.Completed, Failed: r.Failed,
		Sent: r.Sent, Late: r.Late, Latency: r.Latency}
}

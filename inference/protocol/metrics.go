package protocol

import (
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/inferbench/inferbench/inference"
)

// Collector returns the Prometheus collector of the served model, read from
// inference.Server.Stats at each scrape so that every count equals Stats at
// that moment. Names follow Triton's where they mean the same thing
// (docs/user_guide/metrics.md of triton-inference-server/server), labelled
// model and version as Triton labels them:
//
//	nv_inference_request_success              requests answered with logits (Stats.Completed)
//	nv_inference_request_failure{reason}      requests answered with an error or refused:
//	                                          REJECTED (Stats.Rejected), CANCELED (Stats.Cancelled),
//	                                          BACKEND (Stats.Failed), OTHER (Stats.Expired: deadline passed)
//	nv_inference_count                        images in executed batches (Stats.Items)
//	nv_inference_exec_count                   executed batches (Stats.Batches)
//	nv_inference_pending_request_count        requests waiting for a worker now (Stats.Queued)
//	nv_inference_request_duration_us          cumulative latency of successful requests, from
//	                                          arrival to logits on the host (server clock)
//	nv_inference_queue_duration_us            ... of that, waiting for a worker
//	nv_inference_compute_input_duration_us    ... copying the input in (device-timed on a GPU)
//	nv_inference_compute_infer_duration_us    ... the forward pass (device-timed on a GPU)
//	nv_inference_compute_output_duration_us   ... copying the logits out (device-timed on a GPU)
//	inferbench_request_duration_seconds       histogram of the same latency; a bucket's count is
//	                                          Stats.Latency.CountAtOrBelow(bound): values in the
//	                                          server's log-linear bucket that straddles a bound
//	                                          (within 1/128 of it) count in the next bucket
//	inferbench_frontdoor_errors_total{protocol,code}
//	                                          error answers of the front door, whatever their cause
//	                                          (also those counted above), by HTTP status or gRPC code
//
// The stage sums cover the same successful requests as the request duration;
// a stage of a merged batch counts once per request in it, as in Triton.
func (s *Service) Collector() prometheus.Collector { return &collector{s: s} }

type collector struct{ s *Service }

var (
	labels      = []string{"model", "version"}
	descSuccess = prometheus.NewDesc("nv_inference_request_success", "Number of successful inference requests, each counted once whatever its batch size.", labels, nil)
	descFailure = prometheus.NewDesc("nv_inference_request_failure", "Number of failed inference requests, by reason: REJECTED (refused at admission: bad input, queue full, closed), CANCELED (the client left), BACKEND (the worker failed), OTHER (deadline passed).", append(labels, "reason"), nil)
	descCount   = prometheus.NewDesc("nv_inference_count", "Number of inferences performed: images in executed batches.", labels, nil)
	descExec    = prometheus.NewDesc("nv_inference_exec_count", "Number of batch executions (inference count / execution count = mean batch).", labels, nil)
	descPending = prometheus.NewDesc("nv_inference_pending_request_count", "Requests waiting for a worker now.", labels, nil)
	descDur     = prometheus.NewDesc("nv_inference_request_duration_us", "Cumulative time of successful requests from arrival to logits on the host, in microseconds.", labels, nil)
	descStage   = [4]*prometheus.Desc{
		prometheus.NewDesc("nv_inference_queue_duration_us", "Cumulative time successful requests waited for a worker, in microseconds.", labels, nil),
		prometheus.NewDesc("nv_inference_compute_input_duration_us", "Cumulative time successful requests spent copying their input to the device, in microseconds (device-timed on a GPU).", labels, nil),
		prometheus.NewDesc("nv_inference_compute_infer_duration_us", "Cumulative time successful requests spent in the forward pass, in microseconds (device-timed on a GPU).", labels, nil),
		prometheus.NewDesc("nv_inference_compute_output_duration_us", "Cumulative time successful requests spent copying logits to the host, in microseconds (device-timed on a GPU).", labels, nil),
	}
	descHist   = prometheus.NewDesc("inferbench_request_duration_seconds", "Latency of successful requests from arrival to logits on the host, in seconds.", labels, nil)
	descErrors = prometheus.NewDesc("inferbench_frontdoor_errors_total", "Error answers of the front door, whatever their cause, by protocol and HTTP status or gRPC code.", []string{"protocol", "code"}, nil)

	// latencyBuckets are the histogram's upper bounds in seconds.
	latencyBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10}
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSuccess, descFailure, descCount, descExec, descPending, descDur, descHist, descErrors} {
		ch <- d
	}
	for _, d := range descStage {
		ch <- d
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	m := c.s.model
	st := m.srv.Stats()
	lv := []string{m.name, m.version}
	counter := func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append(lv, extra...)...)
	}
	counter(descSuccess, float64(st.Completed))
	counter(descFailure, float64(st.Rejected), "REJECTED")
	counter(descFailure, float64(st.Cancelled), "CANCELED")
	counter(descFailure, float64(st.Failed), "BACKEND")
	counter(descFailure, float64(st.Expired), "OTHER")
	counter(descCount, float64(st.Items))
	counter(descExec, float64(st.Batches))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(st.Queued), lv...)
	lat := latencyOf(st)
	counter(descDur, micros(lat.sum))
	for i, d := range descStage {
		counter(d, micros(lat.stages[i]))
	}
	ch <- prometheus.MustNewConstHistogram(descHist, lat.count, lat.sum.Seconds(), lat.buckets, lv...)
	c.s.errs.collect(ch)
}

// latency is what the collector reads of a Stats snapshot.
type latency struct {
	count   uint64
	sum     time.Duration
	stages  [4]time.Duration
	buckets map[float64]uint64 // cumulative counts at latencyBuckets
}

func latencyOf(st inference.Stats) latency {
	l := latency{count: st.Latency.Count, sum: st.Latency.Sum, buckets: make(map[float64]uint64, len(latencyBuckets))}
	for i := range l.stages {
		l.stages[i] = st.Stages[i].Sum
	}
	for _, b := range latencyBuckets {
		l.buckets[b] = st.Latency.CountAtOrBelow(time.Duration(math.Round(b * float64(time.Second))))
	}
	return l
}

// errorCounts counts the front door's error answers by protocol and code.
type errorCounts struct {
	mu    sync.Mutex
	http  map[int]uint64
	grpcs map[codes.Code]uint64
}

func (e *errorCounts) addHTTP(status int) {
	e.mu.Lock()
	if e.http == nil {
		e.http = map[int]uint64{}
	}
	e.http[status]++
	e.mu.Unlock()
}

func (e *errorCounts) addGRPC(c codes.Code) {
	e.mu.Lock()
	if e.grpcs == nil {
		e.grpcs = map[codes.Code]uint64{}
	}
	e.grpcs[c]++
	e.mu.Unlock()
}

func (e *errorCounts) collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	defer e.mu.Unlock()
	statuses := make([]int, 0, len(e.http))
	for k := range e.http {
		statuses = append(statuses, k)
	}
	sort.Ints(statuses)
	for _, k := range statuses {
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(e.http[k]), "http", strconv.Itoa(k))
	}
	for k, v := range e.grpcs {
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(v), "grpc", k.String())
	}
}

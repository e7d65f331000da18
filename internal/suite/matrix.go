package suite

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/loadgen"
)

// point is one server configuration of the matrix. Under -target only
// batch applies (remote): the servers have their own configuration.
type point struct {
	be                 string
	batch, workers     int
	pipe, prec, graphs string
	devices            int
	remote             bool
	input              string // -input: "fp32" or "uint8"; "" when -input was not given (float32, no input= in names)
	batching           string // -batching: "off" or "on"; "" when -batching was not given (off, no batching= in names)
}

// name is the point's part of a sub-benchmark name.
func (p point) name() string {
	in := ""
	if p.input != "" {
		in = "/input=" + p.input
	}
	if p.batching != "" {
		in += "/batching=" + p.batching
	}
	if p.remote {
		return fmt.Sprintf("batch=%d", p.batch) + in
	}
	return fmt.Sprintf("backend=%s/batch=%d/workers=%d/pipeline=%s/precision=%s/graphs=%s/devices=%d",
		p.be, p.batch, p.workers, p.pipe, p.prec, p.graphs, p.devices) + in
}

// points returns every configuration of the matrix, batches(be) giving the
// batch sizes of back-end be; under -target, one per batch size.
func (c *suiteConfig) points(batches func(be string) []int) []point {
	var out []point
	if len(c.targets) > 0 {
		for _, batch := range batches("target") {
			for _, in := range orNone(c.inputs) {
				out = append(out, point{batch: batch, workers: 1, remote: true, input: in})
			}
		}
		return out
	}
	for _, be := range c.backends {
		for _, batch := range batches(be) {
			for _, workers := range c.workerCounts() {
				for _, pipe := range c.pipelines {
					for _, prec := range c.precisionsFor(be) {
						for _, graphs := range c.graphs {
							for _, devices := range c.devices {
								for _, in := range orNone(c.inputs) {
									for _, bat := range orNone(c.batching) {
										out = append(out, point{be: be, batch: batch, workers: workers, pipe: pipe, prec: prec, graphs: graphs, devices: devices, input: in, batching: bat})
									}
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// loadPoint is one load of the matrix: its part of the name and its spec.
type loadPoint struct {
	suffix string
	spec   loadgen.Spec
}

// loadPoints returns the loads of mode m for a server of workers workers:
// one per -concurrency value (closed) or -rate value (open), named by it.
func (c *suiteConfig) loadPoints(m loadgen.Mode, workers int) []loadPoint {
	switch m {
	case loadgen.Closed:
		var out []loadPoint
		for _, n := range c.concurrencyFor(workers) {
			out = append(out, loadPoint{fmt.Sprintf("/concurrency=%d", n), loadgen.Spec{Mode: m, Concurrency: n}})
		}
		return out
	case loadgen.Open:
		var out []loadPoint
		for _, r := range c.rates {
			out = append(out, loadPoint{"/rate=" + formatRate(r), loadgen.Spec{Mode: m, Rate: r, Poisson: c.flags.poisson, Seed: c.flags.seed}})
		}
		return out
	}
	return []loadPoint{{"", loadgen.Spec{Mode: m}}}
}

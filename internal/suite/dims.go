package suite

import (
	"strconv"
	"strings"

	"github.com/inferbench/inferbench/inference/loadgen"
	"github.com/inferbench/inferbench/internal/serverflag"
)

// The matrix of each benchmark is data: a list of dimensions, each a key=value
// part of the sub-benchmark names, and one cross product (expand) that walks
// them in order, each dimension's values depending on those chosen before
// it. Adding a dimension is one entry here (its flag is registered and
// checked in flags.go) and a row in docs/PARAMETERS.md.

// The flags that list the values of the matrices' dimensions (flags.go
// registers them, scripts/sweep passes them). Those of the server's settings
// are package serverflag's list flags.
var (
	FlagBackends   = serverflag.Backend.List
	FlagBatches    = serverflag.Batches.List
	FlagWorkers    = serverflag.Workers.List
	FlagPipelines  = serverflag.Pipeline.List
	FlagPrecisions = serverflag.Precision.List
	FlagGraphs     = serverflag.Graphs.List
	FlagDevices    = serverflag.Devices.List
)

// The flags of the suite's own dimensions.
const (
	FlagScenarios   = "scenarios"
	FlagInput       = "input"
	FlagBatching    = "batching"
	FlagServers     = "servers"
	FlagLoads       = "loads"
	FlagConcurrency = "concurrency"
	FlagRate        = "rate"
	FlagTransports  = "transports"
)

// point is one sub-benchmark of a matrix: a value of every dimension. A
// dimension a point leaves out keeps its zero value here (or the start's).
type point struct {
	scenario           loadgen.Scenario // BenchmarkScenario's
	hasScenario        bool
	be                 string
	batch, workers     int
	pipe, prec, graphs string
	devices            int
	remote             bool   // -target: the servers have their own configuration
	input              string // -input: "fp32" or "uint8"; "" when -input was not given (float32, unnamed)
	batching           string // -batching: "off" or "on"; "" when not given (off, unnamed)
	servers            int
	load               loadgen.Mode
	conc               int     // closed load: requests outstanding
	rate               float64 // open load and the Server scenario: requests per second
	transport          string
	clients            int    // BenchmarkServerOverhead's
	trace              string // BenchmarkServerOverhead's: "on" or "off"
	name               string // its sub-benchmark name, set by expand
}

// A Dimension describes one dimension of the matrices: its key in the
// sub-benchmark names, the suite flag that lists its values ("" when none
// does), whether it appears in names only when that flag is given, and what
// it is. scripts/sweep builds its flags from these.
type Dimension struct {
	Key, Flag string
	Optional  bool
	Doc       string
}

// dimension is a Dimension with its values: expand calls fn with p
// extended by each value the dimension has at p, and the name part it adds.
type dimension interface {
	describe() Dimension
	expand(c *config, p point, fn func(q point, part string))
}

// dim is a dimension of values of type T.
type dim[T any] struct {
	Dimension
	// values returns its values at p, whose earlier dimensions are set; nil
	// leaves it out of p and of its name (an optional dimension whose flag
	// was not given, or one that does not apply to p).
	values func(c *config, p point) []T
	// format writes a value as the names carry it.
	format func(T) string
	// set stores a value in p.
	set func(p *point, v T)
}

func (d dim[T]) describe() Dimension { return d.Dimension }

func (d dim[T]) expand(c *config, p point, fn func(point, string)) {
	vals := d.values(c, p)
	if vals == nil {
		fn(p, "")
		return
	}
	for _, v := range vals {
		q := p
		d.set(&q, v)
		fn(q, "/"+d.Key+"="+d.format(v))
	}
}

// expand returns the cross product of dims from start, in order, each point
// named by its parts.
func (c *config) expand(dims []dimension, start point) []point {
	var out []point
	var walk func(i int, p point, name string)
	walk = func(i int, p point, name string) {
		if i == len(dims) {
			p.name = strings.TrimPrefix(name, "/")
			out = append(out, p)
			return
		}
		dims[i].expand(c, p, func(q point, part string) { walk(i+1, q, name+part) })
	}
	walk(0, start, "")
	return out
}

func itoa(n int) string       { return strconv.Itoa(n) }
func str(s string) string     { return s }
func fixed[T any](v ...T) []T { return v }

// local is nil under -target (a running server's settings are its own),
// else vals.
func local[T any](c *config, vals []T) []T {
	if len(c.targets) > 0 {
		return nil
	}
	return vals
}

// The dimensions, in the order of the names.
var (
	scenarioDim = dim[loadgen.Scenario]{
		Dimension: Dimension{Key: "scenario", Flag: FlagScenarios, Doc: "BenchmarkScenario: MLPerf LoadGen's scenario"},
		values:    func(c *config, _ point) []loadgen.Scenario { return c.scenarios },
		format:    loadgen.Scenario.String,
		set:       func(p *point, v loadgen.Scenario) { p.scenario, p.hasScenario = v, true },
	}
	backendDim = dim[string]{
		Dimension: Dimension{Key: "backend", Flag: FlagBackends, Doc: "the back-end: cpu, cuda or nop"},
		values:    func(c *config, _ point) []string { return local(c, c.backends) },
		format:    str, set: func(p *point, v string) { p.be = v },
	}
	batchDim = dim[int]{
		Dimension: Dimension{Key: "batch", Flag: FlagBatches, Doc: "images per request (a scenario's own where it fixes them)"},
		values: func(c *config, p point) []int {
			if n := p.scenario.Samples(); p.hasScenario && n > 0 {
				return []int{n}
			}
			return c.batchesFor(p.be)
		},
		format: itoa, set: func(p *point, v int) { p.batch = v },
	}
	workersDim = dim[int]{
		Dimension: Dimension{Key: "workers", Flag: FlagWorkers, Doc: "compute workers of each server"},
		values:    func(c *config, _ point) []int { return local(c, c.workerCounts()) },
		format:    itoa, set: func(p *point, v int) { p.workers = v },
	}
	pipelineDim = dim[string]{
		Dimension: Dimension{Key: "pipeline", Flag: FlagPipelines, Doc: "serial or overlap"},
		values:    func(c *config, _ point) []string { return local(c, c.pipelines) },
		format:    str, set: func(p *point, v string) { p.pipe = v },
	}
	precisionDim = dim[string]{
		Dimension: Dimension{Key: "precision", Flag: FlagPrecisions, Doc: "fp32, tf32 or fp16"},
		values:    func(c *config, p point) []string { return local(c, c.precisionsFor(p.be)) },
		format:    str, set: func(p *point, v string) { p.prec = v },
	}
	graphsDim = dim[string]{
		Dimension: Dimension{Key: "graphs", Flag: FlagGraphs, Doc: "CUDA graphs on or off"},
		values:    func(c *config, _ point) []string { return local(c, c.graphs) },
		format:    str, set: func(p *point, v string) { p.graphs = v },
	}
	devicesDim = dim[int]{
		Dimension: Dimension{Key: "devices", Flag: FlagDevices, Doc: "GPUs the workers are spread over"},
		values:    func(c *config, _ point) []int { return local(c, c.devices) },
		format:    itoa, set: func(p *point, v int) { p.devices = v },
	}
	inputDim = dim[string]{
		Dimension: Dimension{Key: "input", Flag: FlagInput, Optional: true, Doc: "the input's datatype: fp32 or uint8"},
		values:    func(c *config, _ point) []string { return c.inputs },
		format:    str, set: func(p *point, v string) { p.input = v },
	}
	batchingDim = dim[string]{
		Dimension: Dimension{Key: "batching", Flag: FlagBatching, Optional: true, Doc: "the server's dynamic batching: off or on"},
		values:    func(c *config, _ point) []string { return local(c, c.batching) },
		format:    str, set: func(p *point, v string) { p.batching = v },
	}
	serversDim = dim[int]{
		Dimension: Dimension{Key: "servers", Flag: FlagServers, Optional: true, Doc: "servers driven at once (named under -target too)"},
		values: func(c *config, _ point) []int {
			if c.servers == nil && len(c.targets) == 0 {
				return nil
			}
			return c.serverCounts()
		},
		format: itoa, set: func(p *point, v int) { p.servers = v },
	}
	loadDim = dim[loadgen.Mode]{
		Dimension: Dimension{Key: "load", Flag: FlagLoads, Doc: "burst, closed or open"},
		values:    func(c *config, _ point) []loadgen.Mode { return c.loads },
		format:    loadgen.Mode.String, set: func(p *point, v loadgen.Mode) { p.load = v },
	}
	concurrencyDim = dim[int]{
		Dimension: Dimension{Key: "concurrency", Flag: FlagConcurrency, Doc: "closed load: requests outstanding (2 per worker of every server by default)"},
		values: func(c *config, p point) []int {
			if p.load != loadgen.Closed {
				return nil
			}
			return c.concurrencyFor(p.workers * p.servers)
		},
		format: itoa, set: func(p *point, v int) { p.conc = v },
	}
	rateDim = dim[float64]{
		Dimension: Dimension{Key: "rate", Flag: FlagRate, Doc: "open load and the Server scenario: requests per second"},
		values: func(c *config, p point) []float64 {
			if p.hasScenario && p.scenario == loadgen.Server || !p.hasScenario && p.load == loadgen.Open {
				return c.rates
			}
			return nil
		},
		format: formatRate, set: func(p *point, v float64) { p.rate = v },
	}
	transportDim = dim[string]{
		Dimension: Dimension{Key: "transport", Flag: FlagTransports, Doc: "how requests reach the servers: inproc or a wire transport"},
		values: func(c *config, p point) []string {
			var out []string
			for _, tr := range c.transports {
				if tr != inproc || p.servers == 1 { // one in-process server
					out = append(out, tr)
				}
			}
			return out
		},
		format: str, set: func(p *point, v string) { p.transport = v },
	}
)

// serverDims are BenchmarkServer's dimensions.
var serverDims = []dimension{backendDim, batchDim, workersDim, pipelineDim, precisionDim, graphsDim, devicesDim,
	inputDim, batchingDim, serversDim, loadDim, concurrencyDim, rateDim, transportDim}

// scenarioDims are BenchmarkScenario's: its scenarios over the server
// configurations, the Server scenario at each rate.
var scenarioDims = []dimension{scenarioDim, backendDim, batchDim, workersDim, pipelineDim, precisionDim, graphsDim, devicesDim,
	inputDim, batchingDim, rateDim}

// capacityDims are BenchmarkCapacity's: a search with and without dynamic
// batching, of requests of -batches images (1 by default).
var capacityDims = []dimension{backendDim,
	dim[int]{Dimension: batchDim.Dimension, format: itoa, set: batchDim.set,
		values: func(c *config, _ point) []int {
			if c.batches == nil {
				return []int{1}
			}
			return c.batches
		}},
	workersDim,
	dim[string]{Dimension: Dimension{Key: "batching", Doc: "the search without and with dynamic batching"}, format: str, set: batchingDim.set,
		values: func(*config, point) []string { return fixed("off", "on") }},
}

// overheadDims are BenchmarkServerOverhead's fixed dimensions.
var overheadDims = []dimension{
	dim[int]{Dimension: Dimension{Key: "workers"}, format: itoa, set: workersDim.set,
		values: func(*config, point) []int { return fixed(1, 2) }},
	dim[int]{Dimension: Dimension{Key: "clients", Doc: "goroutines each sending one request at a time"}, format: itoa,
		set: func(p *point, v int) { p.clients = v }, values: func(*config, point) []int { return fixed(1, 4) }},
	dim[string]{Dimension: Dimension{Key: "batching"}, format: str, set: batchingDim.set,
		values: func(*config, point) []string { return fixed("off", "on") }},
	dim[string]{Dimension: Dimension{Key: "trace", Doc: "every batch's timeline recorded"}, format: str,
		set: func(p *point, v string) { p.trace = v }, values: func(*config, point) []string { return fixed("off", "on") }},
}

// start is the point every matrix grows from: one worker and one server
// unless a dimension says otherwise, remote under -target.
func (c *config) start() point {
	return point{workers: 1, servers: 1, remote: len(c.targets) > 0}
}

// Dimensions lists BenchmarkServer's dimensions in the order of its names.
func Dimensions() []Dimension {
	out := make([]Dimension, len(serverDims))
	for i, d := range serverDims {
		out[i] = d.describe()
	}
	return out
}

// loadSpec is p's load for the load generator.
func (c *config) loadSpec(p point) loadgen.Spec {
	switch p.load {
	case loadgen.Closed:
		return loadgen.Spec{Mode: p.load, Concurrency: p.conc}
	case loadgen.Open:
		return loadgen.Spec{Mode: p.load, Rate: p.rate, Poisson: c.flags.poisson, Seed: c.flags.shared.Seed}
	}
	return loadgen.Spec{Mode: p.load}
}

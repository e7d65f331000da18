//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
)

// Convolutions through cuDNN's backend ("graph") API (backend.ConvsGraph):
//
//  1. For every distinct convolution problem of a prepared batch size, the
//     planner builds the operation graph conv -> +bias -> (+shortcut) ->
//     (ReLU) (cudnn.FusedConv) on worker 0, asks heuristics (mode A) for
//     engine configurations, finalizes the plans of the first graphTopK that
//     fit the workspace limit and the precision's numerical rules, and times
//     each, and the legacy call, with CUDA events on real buffers.
//  2. The fastest wins; a graph choice is recorded as its rank in the
//     heuristics' list and its engine's global index (graphChoice), in the
//     algorithm cache too, so that a warm start rebuilds the plan without
//     timing anything.
//  3. Every worker finalizes its own plans (a plan is bound to the handle,
//     and so the device, that made it) before capture; a batch size planned
//     after Open takes the heuristics' first usable configuration untimed.

// graphTopK is how many of the heuristics' configurations are timed.
const graphTopK = 6

// graphReps is how many runs one timing averages, after one warm-up run.
const graphReps = 10

// graphChoice is a backend-API execution plan chosen for a convolution.
type graphChoice struct {
	rank   int   // index in the mode-A heuristics' list
	engine int64 // the engine's global index, to check rank against
	ws     uintptr
}

// fusedExec is a worker's finalized plan for one problem, with the graph it
// came from.
type fusedExec struct {
	g *cudnn.FusedGraph
	p *cudnn.Plan
}

func (f *fusedExec) destroy() {
	if f != nil {
		f.p.Destroy()
		f.g.Destroy()
	}
}

// convTiming is one measured convolution problem, for tests and reports.
type convTiming struct {
	n, layer int     // batch size and the first convolution index with the problem
	legacy   float64 // milliseconds per call of the legacy choice
	graph    float64 // of the fastest graph plan; negative when none ran
	engine   int64   // its engine's global index
	rank     int
	compiled bool // the engine compiles its kernel at run time
	chosen   string
}

// fusedSpec is the operation graph of layer l at batch n.
func fusedSpec(net *network, l *convLayer, n int) cudnn.FusedConv {
	return cudnn.FusedConv{N: n, C: l.in, H: l.inH, W: l.inW, K: l.out, R: l.k, OutH: l.outH, OutW: l.outW,
		Pad: l.pad, Stride: l.stride, Format: net.format, Data: net.dataType, Compute: cudnn.Float,
		ReLU: l.relu, Residual: l.residual}
}

// allowed reports whether an engine's numerical notes suit precision p: no
// reduced-precision accumulation ever, and no tensor cores or down-converted
// inputs for FP32.
func allowed(p backend.Precision, c cudnn.EngineConfig) bool {
	for _, n := range c.Notes {
		switch n {
		case cudnn.NoteReducedPrecisionReduction:
			return false
		case cudnn.NoteTensorCore, cudnn.NoteDownConvertInputs:
			if p == backend.FP32 {
				return false
			}
		}
	}
	return true
}

// buildFused finalizes, on w's handle, the plan of configuration rank for spec
// and checks that it is still engine (engine < 0 skips the check).
func (w *worker) buildFused(spec cudnn.FusedConv, rank int, engine int64) (*fusedExec, error) {
	g, err := w.e.dnn.NewFusedGraph(w.dnn, spec, cudnn.HeurA)
	if err != nil {
		return nil, err
	}
	if rank >= len(g.Configs) || (engine >= 0 && g.Configs[rank].Engine != engine) {
		g.Destroy()
		return nil, fmt.Errorf("cuda: heuristics no longer propose engine %d at rank %d", engine, rank)
	}
	p, err := w.e.dnn.NewPlan(w.dnn, spec, g.Configs[rank])
	if err != nil {
		g.Destroy()
		return nil, err
	}
	return &fusedExec{g: g, p: p}, nil
}

// fusedFor returns w's plan for spec, finalizing it on first use. The caller
// has bound w.
func (w *worker) fusedFor(spec cudnn.FusedConv, ch *graphChoice) (*fusedExec, error) {
	if f := w.fused[spec]; f != nil {
		return f, nil
	}
	f, err := w.buildFused(spec, ch.rank, ch.engine)
	if err != nil {
		return nil, err
	}
	if f.p.Workspace > w.wsSize {
		f.destroy()
		return nil, fmt.Errorf("cuda: plan needs %d bytes of workspace, the worker has %d", f.p.Workspace, w.wsSize)
	}
	if w.fused == nil {
		w.fused = map[cudnn.FusedConv]*fusedExec{}
	}
	w.fused[spec] = f
	return f, nil
}

// runFused enqueues layer l of plan p as its backend-API plan.
func (w *worker) runFused(p *plan, l *convLayer, x, y, z uintptr) error {
	f, err := w.fusedFor(fusedSpec(w.e.net, l, p.n), p.convs[l.index].graph)
	if err != nil {
		return err
	}
	return w.dnn.Run(f.p, x, w.dev.param(l.w), w.dev.param(l.b), z, y, w.ws)
}

// prepareFused finalizes w's plans for every graph convolution of the
// prepared batch sizes, so that capture finds them.
func (w *worker) prepareFused() error {
	return withContext(w.dev, func() error {
		for _, n := range w.e.opts.Batches {
			p := w.e.plans.prepared(n)
			for _, l := range w.e.net.convs {
				if ch := p.convs[l.index].graph; ch != nil {
					if _, err := w.fusedFor(fusedSpec(w.e.net, l, n), ch); err != nil {
						return w.wrap(fmt.Sprintf("plan of convolution %d, batch %d", l.index, n), err)
					}
				}
			}
		}
		return nil
	})
}

// legacyConv enqueues layer l as the legacy calls of choice ch, with ws bytes
// of workspace at wsp.
func (w *worker) legacyConv(l *convLayer, c *convPlan, ch choice, x, y, z, wsp, ws uintptr) error {
	net, h := w.e.net, w.dnn
	wt, b := w.dev.param(l.w), w.dev.param(l.b)
	if ch.fused {
		act, alpha2, zp := net.identity, float32(0), y
		if l.relu {
			act = net.relu
		}
		if z != 0 {
			alpha2, zp = 1, z
		}
		return h.ConvBiasActivation(1, c.x, x, l.filter, wt, c.conv, ch.algo, wsp, ws, alpha2, c.y, zp, l.bias, b, act, c.y, y)
	}
	if err := h.ConvForward(1, c.x, x, l.filter, wt, c.conv, ch.algo, wsp, ws, 0, c.y, y); err != nil {
		return err
	}
	return h.AddTensor(1, l.bias, b, 1, c.y, y)
}

// timeCalls returns the mean device time in milliseconds of enqueue on w's
// compute stream over reps runs back to back, after one untimed run.
func (w *worker) timeCalls(enqueue func() error, reps int) (float64, error) {
	if err := enqueue(); err != nil {
		return 0, err
	}
	e0, err := cudadrv.NewEvent()
	if err != nil {
		return 0, err
	}
	defer e0.Destroy()
	e1, err := cudadrv.NewEvent()
	if err != nil {
		return 0, err
	}
	defer e1.Destroy()
	if err := e0.Record(w.comp); err != nil {
		return 0, err
	}
	for range reps {
		if err := enqueue(); err != nil {
			return 0, errors.Join(err, w.comp.Synchronize())
		}
	}
	if err := errors.Join(e1.Record(w.comp), e1.Synchronize()); err != nil {
		return 0, err
	}
	d, err := e1.Since(e0)
	if err != nil {
		return 0, err
	}
	return float64(d) / float64(time.Millisecond) / float64(reps), nil
}

// quickGate is how long the quick search's gate holds the compute stream at
// most: far longer than enqueueing quickReps calls takes, so a gate that
// expires means that a call waited for the stream (such a call could not be
// captured in a graph either).
const quickGate = 250 * time.Millisecond

// timeCandidate returns the device time in milliseconds of one call of
// enqueue on w's compute stream, for the quick search. After one untimed call
// (which pays what a first call costs: loading kernels, the library's own
// set-up), it times one call alone; if that took more than twice beat (when
// beat is positive), it returns that time, as the candidate cannot win.
// Otherwise it returns the mean of quickReps calls enqueued behind a gate
// (worker.gated), so that they run back to back however slowly the host
// enqueues them; ErrGateExpired says that a call waited for the stream.
func (w *worker) timeCandidate(enqueue func() error, beat float64) (float64, error) {
	if err := errors.Join(enqueue(), w.comp.Synchronize()); err != nil {
		return 0, err
	}
	s := &w.slots[0]
	since := func() (float64, error) {
		d, err := s.evComp1.Since(s.evComp0)
		return float64(d) / float64(time.Millisecond), err
	}
	if err := s.evComp0.Record(w.comp); err != nil {
		return 0, err
	}
	if err := enqueue(); err != nil {
		return 0, errors.Join(err, w.comp.Synchronize())
	}
	if err := errors.Join(s.evComp1.Record(w.comp), s.evComp1.Synchronize()); err != nil {
		return 0, err
	}
	ms, err := since()
	if err != nil || (beat > 0 && ms > 2*beat) {
		return ms, err
	}
	err = w.gatedFor(quickGate, func() error {
		if err := s.evComp0.Record(w.comp); err != nil {
			return err
		}
		for range quickReps {
			if err := enqueue(); err != nil {
				return err
			}
		}
		return s.evComp1.Record(w.comp)
	})
	if err != nil {
		return 0, err
	}
	ms, err = since()
	return ms / quickReps, err
}

// measureGraph times the legacy choice leg of layer l (plan descriptors c) and
// the first graphTopK usable backend-API plans, on worker w with buffers x, y,
// z and ws bytes of workspace at wsp, and returns the fastest graph choice, or
// nil when the legacy call is at least as fast or no plan ran.
func (pl *planner) measureGraph(w *worker, l *convLayer, c *convPlan, leg choice, n int, x, y, z, wsp, ws uintptr) (*graphChoice, convTiming, error) {
	t := convTiming{n: n, layer: l.index, graph: -1, rank: -1, engine: -1, chosen: "legacy"}
	if err := c.conv.SetMathType(leg.math); err != nil {
		return nil, t, err
	}
	var err error
	if t.legacy, err = w.timeCalls(func() error { return w.legacyConv(l, c, leg, x, y, z, wsp, ws) }, graphReps); err != nil {
		return nil, t, fmt.Errorf("timing the legacy call: %w", err)
	}
	spec := fusedSpec(pl.net, l, n)
	g, err := pl.dnn.NewFusedGraph(w.dnn, spec, cudnn.HeurA)
	if err != nil {
		return nil, t, nil // no engine takes the graph: legacy it is
	}
	defer g.Destroy()
	var best *graphChoice
	tried := 0
	for rank, cfg := range g.Configs {
		if tried == graphTopK {
			break
		}
		if !allowed(pl.opts.Precision, cfg) {
			continue
		}
		p, err := pl.dnn.NewPlan(w.dnn, spec, cfg)
		if err != nil {
			continue
		}
		if p.Workspace > ws {
			p.Destroy()
			continue
		}
		tried++
		wt, b := w.dev.param(l.w), w.dev.param(l.b)
		ms, err := w.timeCalls(func() error { return w.dnn.Run(p, x, wt, b, z, y, wsp) }, graphReps)
		p.Destroy()
		if err != nil {
			if deviceLost(err) {
				return nil, t, err
			}
			continue
		}
		if t.graph < 0 || ms < t.graph {
			t.graph, t.rank, t.engine, t.compiled = ms, rank, cfg.Engine, cfg.RuntimeCompiled
			best = &graphChoice{rank: rank, engine: cfg.Engine, ws: p.Workspace}
		}
	}
	if best == nil || t.graph >= t.legacy {
		return nil, t, nil
	}
	t.chosen = "graph"
	return best, t, nil
}

// graphChoiceFromCache turns a cached graph entry into a choice, checking on
// w that the plan still builds; the plan is kept as w's. ok is false when the
// entry must be measured again.
func (pl *planner) graphChoiceFromCache(w *worker, spec cudnn.FusedConv, v cachedAlgo) (ch *graphChoice, ok bool) {
	if !v.Graph {
		return nil, true // the legacy call won
	}
	g := &graphChoice{rank: v.Rank, engine: v.Engine, ws: uintptr(v.Workspace)}
	f, err := w.buildFused(spec, g.rank, g.engine)
	if err != nil || f.p.Workspace > findWorkspace {
		f.destroy()
		return nil, false
	}
	g.ws = f.p.Workspace
	f.destroy()
	return g, true
}

// heuristicGraph picks, without timing, the heuristics' first configuration
// for layer l at batch n that suits the precision and fits limit bytes, or nil.
func (pl *planner) heuristicGraph(w *worker, l *convLayer, n int, limit uintptr) *graphChoice {
	spec := fusedSpec(pl.net, l, n)
	g, err := pl.dnn.NewFusedGraph(w.dnn, spec, cudnn.HeurA)
	if err != nil {
		return nil
	}
	defer g.Destroy()
	for rank, cfg := range g.Configs {
		if !allowed(pl.opts.Precision, cfg) {
			continue
		}
		p, err := pl.dnn.NewPlan(w.dnn, spec, cfg)
		if err != nil {
			continue
		}
		ws := p.Workspace
		p.Destroy()
		if ws <= limit {
			return &graphChoice{rank: rank, engine: cfg.Engine, ws: ws}
		}
	}
	return nil
}

// graphKey is the algorithm-cache key of layer l's graph decision.
func graphKey(prefix string, key shapeKey, l *convLayer) string {
	return prefix + fmt.Sprintf("graph %+v relu=%v residual=%v", key, l.relu, l.residual)
}

// graphTimings returns the measurements of the last prepare, by batch size
// and layer.
func (pl *planner) graphTimings() []convTiming {
	out := slices.Clone(pl.timings)
	slices.SortFunc(out, func(a, b convTiming) int {
		if a.n != b.n {
			return a.n - b.n
		}
		return a.layer - b.layer
	})
	return out
}

// convsConfig is the config line cuda-convs: the path (backend.Convs) and,
// for graph, how many convolutions of the prepared sizes run as backend-API
// plans, as "graph (G of N prepared convolutions as backend-API plans)".
func (pl *planner) convsConfig() string {
	if pl.opts.Convs != backend.ConvsGraph {
		return pl.opts.Convs.String()
	}
	g, n := 0, 0
	for _, b := range pl.opts.Batches {
		if p := pl.prepared(b); p != nil {
			for _, c := range p.convs {
				n++
				if c.graph != nil {
					g++
				}
			}
		}
	}
	return fmt.Sprintf("graph (%d of %d prepared convolutions as backend-API plans)", g, n)
}

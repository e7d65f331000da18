//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
)

// plan is everything a forward pass of n images needs besides buffers: tensor
// descriptors and the chosen algorithm of every convolution.
type plan struct {
	n                int
	convs            []convPlan // as network.convs
	stemOut, poolOut cudnn.TensorDesc
	input            cudnn.TensorDesc // the float NCHW input, when network.transform
	ws               uintptr          // the most workspace any convolution needs
}

// convPlan is one convolution of a plan.
type convPlan struct {
	x, y  cudnn.TensorDesc
	conv  cudnn.ConvDesc
	algo  cudnn.ConvFwdAlgo
	ws    uintptr
	fused bool         // one cudnnConvolutionBiasActivationForward; else convolution then bias
	graph *graphChoice // a backend-API plan (backend.ConvsGraph); nil: the legacy calls above
}

// shapeKey identifies a convolution problem for the algorithm cache.
type shapeKey struct{ in, inH, inW, out, k, stride, pad, n int }

// choice is a chosen algorithm.
type choice struct {
	algo  cudnn.ConvFwdAlgo
	math  cudnn.MathType
	ws    uintptr
	fused bool
	graph *graphChoice // backend.ConvsGraph: the plan that beat the legacy calls, or nil
}

func (p *plan) destroy() {
	for _, c := range p.convs {
		c.x.Destroy()
		c.y.Destroy()
		c.conv.Destroy()
	}
	p.convs = nil
	for _, d := range []cudnn.TensorDesc{p.stemOut, p.poolOut, p.input} {
		d.Destroy()
	}
}

// chooser picks an algorithm for one convolution of a plan being made.
type chooser func(l *convLayer, c *convPlan) (choice, error)

// planner makes an engine's plans and keeps them. Its methods are safe for
// concurrent use.
type planner struct {
	dnn  *cudnn.Lib
	net  *network
	opts backend.Options

	mu    sync.Mutex
	plans []*plan // index: batch size; read under mu, or after prepare for prepared sizes
	// runAs maps a batch size n to the size the forward pass runs at: the
	// smallest prepared size in [n, 2n] (its plan and graph exist, and the
	// extra images are stale memory whose logits nobody reads: images never
	// mix), or n itself. Fixed by prepare.
	runAs []int

	search  search       // how prepare chooses algorithms the cache does not hold
	cache   cacheUse     // what prepare did with the algorithm cache
	timings []convTiming // what prepare measured of backend-API plans
}

func newPlanner(dnn *cudnn.Lib, net *network, opts backend.Options) *planner {
	return &planner{dnn: dnn, net: net, opts: opts, plans: make([]*plan, opts.MaxBatch+1), search: searchFromEnv()}
}

// newPlan makes the descriptors for n images and asks choose for every
// convolution's algorithm.
func (pl *planner) newPlan(n int, choose chooser) (*plan, error) {
	dnn, net := pl.dnn, pl.net
	dt := net.dataType
	p := &plan{n: n, convs: make([]convPlan, len(net.convs))}
	ok := false
	defer func() {
		if !ok {
			p.destroy()
		}
	}()
	t4 := func(c, h, w int) (cudnn.TensorDesc, error) { return dnn.NewTensor4d(net.format, dt, n, c, h, w) }
	f4 := func(c, h, w int) (cudnn.TensorDesc, error) {
		return dnn.NewTensor4d(cudnn.NCHW, cudnn.Float, n, c, h, w)
	}
	var err error
	for i, l := range net.convs {
		c := &p.convs[i]
		if c.x, err = t4(l.in, l.inH, l.inW); err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
		if c.y, err = t4(l.out, l.outH, l.outW); err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
		if c.conv, err = dnn.NewConv2d(l.pad, l.stride, cudnn.CrossCorrelation, dt, net.math); err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
		ch, err := choose(l, c)
		if err != nil {
			return nil, fmt.Errorf("cuda: convolution %d (%dx%dx%d -> %d, %dx%d/%d) batch %d: %w",
				i, l.in, l.inH, l.inW, l.out, l.k, l.k, l.stride, n, err)
		}
		if err := c.conv.SetMathType(ch.math); err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
		c.algo, c.ws, c.fused, c.graph = ch.algo, ch.ws, ch.fused, ch.graph
		p.ws = max(p.ws, ch.ws)
		if ch.graph != nil {
			p.ws = max(p.ws, ch.graph.ws)
		}
	}
	stem := net.convs[0]
	if p.stemOut, err = t4(stem.out, stem.outH, stem.outW); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if p.poolOut, err = t4(stem.out, net.poolH, net.poolW); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if net.transform {
		if p.input, err = f4(3, pl.opts.Height, pl.opts.Width); err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
	}
	ok = true
	return p, nil
}

// pick chooses from results (the heuristics' ranking) the first that
// succeeded within limit bytes of workspace. A convolution without ReLU can
// be fused only with the implicit precomputed GEMM algorithm, so that one is
// taken when it is usable.
func pick(results []cudnn.AlgoPerf, relu bool, limit uintptr) (choice, error) {
	var best *cudnn.AlgoPerf
	for i := range results {
		r := &results[i]
		if r.Err == nil && r.Memory <= limit {
			best = r
			break
		}
	}
	if best == nil {
		return choice{}, errors.New("no algorithm fits the workspace")
	}
	if !relu && best.Algo != cudnn.AlgoImplicitPrecompGEMM {
		for i := range results {
			r := &results[i]
			if r.Algo == cudnn.AlgoImplicitPrecompGEMM && r.Err == nil && r.Memory <= limit {
				best = r
				break
			}
		}
	}
	return asCalled(relu, *best), nil
}

// prepare plans every batch size of Options.Batches, measuring algorithms on w
// (one search per distinct convolution problem, found in the algorithm cache
// when it holds it), fixes runAs and returns the workspace the plans need.
// The searches are the sub-step plan.search of clock, reading and checking
// the cache plan.cache.
func (pl *planner) prepare(w *worker, clock *stopwatch) (uintptr, error) {
	pl.cache.path = cachePath(pl.opts.AlgoCache)
	var cache *algoCache
	_ = clock.time("plan.cache", func() (err error) {
		cache, pl.cache.err = loadAlgoCache(pl.cache.path)
		return nil
	})
	gpu, err := w.dev.dev.Name()
	if err != nil {
		return 0, fmt.Errorf("cuda: %w", err)
	}
	prefix := fmt.Sprintf("%s|cudnn %d|%s|%s", gpu, pl.dnn.Version(), pl.opts.Precision, pl.search.keyPart())
	var ws uintptr
	err = withContext(w.dev, func() (err error) {
		var find uintptr // search workspace, allocated on the first search
		needFind := func() error {
			if find != 0 {
				return nil
			}
			var err error
			if find, err = allocDevice(findWorkspace); err != nil {
				return fmt.Errorf("search workspace: %w", err)
			}
			return nil
		}
		defer func() {
			if find != 0 {
				err = errors.Join(err, cudadrv.MemFree(find))
			}
		}()
		seen := map[shapeKey]choice{}
		seenGraph := map[cudnn.FusedConv]*graphChoice{}
		buffers := func(l *convLayer) (x, y, z uintptr) {
			x, y = w.act[0], w.act[1]
			if l.index == 0 {
				x, y = w.slots[0].in, w.stem
				if pl.net.transform {
					x = w.x
				}
			}
			if l.residual {
				z = w.act[2]
			}
			return x, y, z
		}
		for _, n := range pl.opts.Batches {
			legacy := func(l *convLayer, c *convPlan) (choice, error) {
				key := shapeKey{l.in, l.inH, l.inW, l.out, l.k, l.stride, l.pad, n}
				if ch, ok := seen[key]; ok {
					return ch, nil
				}
				ckey := prefix + fmt.Sprintf("%+v relu=%v", key, l.relu)
				if v, ok := cache.get(ckey); ok {
					var ch choice
					ok := false
					_ = clock.timeWhat("plan.cache", convWhat(n, l), func() error {
						ch, ok = validate(w.dnn, l, c, v)
						return nil
					})
					if ok {
						pl.cache.hits++
						seen[key] = ch
						return ch, nil
					}
				}
				pl.cache.misses++
				if err := needFind(); err != nil {
					return choice{}, err
				}
				x, y, z := buffers(l)
				var ch choice
				err := clock.timeWhat("plan.search", convWhat(n, l), func() (err error) {
					ch, err = pl.search.choose(w, l, c, x, y, z, find, findWorkspace)
					return err
				})
				if err != nil {
					return choice{}, err
				}
				seen[key] = ch
				cache.put(ckey, cachedAlgo{Algo: int(ch.algo), Math: int(ch.math), Workspace: uint64(ch.ws), Fused: ch.fused})
				return ch, nil
			}
			choose := func(l *convLayer, c *convPlan) (choice, error) {
				ch, err := legacy(l, c)
				if err != nil || pl.opts.Convs != backend.ConvsGraph {
					return ch, err
				}
				spec := fusedSpec(pl.net, l, n)
				if g, ok := seenGraph[spec]; ok {
					ch.graph = g
					return ch, nil
				}
				key := shapeKey{l.in, l.inH, l.inW, l.out, l.k, l.stride, l.pad, n}
				gkey := graphKey(prefix, key, l)
				if v, ok := cache.get(gkey); ok {
					var g *graphChoice
					ok := false
					_ = clock.timeWhat("plan.cache", convWhat(n, l)+" graph", func() error {
						g, ok = pl.graphChoiceFromCache(w, spec, v)
						return nil
					})
					if ok {
						pl.cache.hits++
						seenGraph[spec], ch.graph = g, g
						return ch, nil
					}
				}
				pl.cache.misses++
				if err := needFind(); err != nil {
					return choice{}, err
				}
				x, y, z := buffers(l)
				var g *graphChoice
				var t convTiming
				err = clock.timeWhat("plan.search", convWhat(n, l)+" graph", func() (err error) {
					g, t, err = pl.measureGraph(w, l, c, ch, n, x, y, z, find, findWorkspace)
					return err
				})
				if err != nil {
					return choice{}, err
				}
				pl.timings = append(pl.timings, t)
				v := cachedAlgo{Graph: g != nil}
				if g != nil {
					v.Rank, v.Engine, v.Workspace = g.rank, g.engine, uint64(g.ws)
				}
				cache.put(gkey, v)
				seenGraph[spec], ch.graph = g, g
				return ch, nil
			}
			p, err := pl.newPlan(n, choose)
			if err != nil {
				return err
			}
			pl.plans[n] = p
			ws = max(ws, p.ws, p.besideWorkspace(pl.net))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	_ = clock.time("plan.cache", func() error {
		if serr := cache.save(); serr != nil {
			pl.cache.err = errors.Join(pl.cache.err, serr)
		}
		return nil
	})
	pl.runAs = padSizes(pl.opts.MaxBatch, func(m int) bool { return pl.plans[m] != nil })
	return ws, nil
}

// convWhat names a convolution of a plan in the set-up timeline.
func convWhat(n int, l *convLayer) string { return fmt.Sprintf("batch %d conv %d", n, l.index) }

// validate checks a cached choice against this cuDNN: the algorithm must accept
// the shapes with no more workspace than recorded.
func validate(h cudnn.Handle, l *convLayer, c *convPlan, v cachedAlgo) (choice, bool) {
	ch := choice{algo: cudnn.ConvFwdAlgo(v.Algo), math: cudnn.MathType(v.Math), ws: uintptr(v.Workspace), fused: v.Fused}
	if ch.fused != (l.relu || ch.algo == cudnn.AlgoImplicitPrecompGEMM) || ch.ws > findWorkspace {
		return choice{}, false
	}
	if err := c.conv.SetMathType(ch.math); err != nil {
		return choice{}, false
	}
	need, err := h.ConvForwardWorkspace(c.x, l.filter, c.conv, c.y, ch.algo)
	if err != nil || need > ch.ws {
		return choice{}, false
	}
	return ch, true
}

// prepared is the plan of a size prepare made, or nil.
func (pl *planner) prepared(n int) *plan {
	if slices.Contains(pl.opts.Batches, n) {
		return pl.plans[n]
	}
	return nil
}

// planFor returns the plan for n images, making it with cuDNN's heuristics on
// w's handle when n was not prepared. The caller has bound w.
func (pl *planner) planFor(n int, w *worker) (*plan, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if p := pl.plans[n]; p != nil {
		return p, nil
	}
	choose := func(l *convLayer, c *convPlan) (choice, error) {
		res, err := heuristics(w, l, c)
		if err != nil {
			return choice{}, err
		}
		ch, err := pick(res, l.relu, w.wsSize)
		if err == nil && pl.opts.Convs == backend.ConvsGraph {
			ch.graph = pl.heuristicGraph(w, l, n, w.wsSize)
		}
		return ch, err
	}
	p, err := pl.newPlan(n, choose)
	if err != nil {
		return nil, err
	}
	pl.plans[n] = p
	return p, nil
}

// destroy releases every plan's descriptors.
func (pl *planner) destroy() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for i, p := range pl.plans {
		if p != nil {
			p.destroy()
			pl.plans[i] = nil
		}
	}
}

// choose picks layer l's algorithm for the descriptors of c on w, running
// convolutions from x to y (with residual z) with wsSize bytes of workspace
// at ws, as the search says.
func (s search) choose(w *worker, l *convLayer, c *convPlan, x, y, z, ws, wsSize uintptr) (choice, error) {
	var cands []choice
	if s.exhaustive {
		res, err := w.dnn.FindConvForward(c.x, x, l.filter, w.dev.param(l.w), c.conv, c.y, y, ws, wsSize)
		if err != nil {
			return choice{}, err
		}
		cands = choices(l, timedTopK(res, wsSize, quickTopK))
		if len(cands) == 0 {
			return choice{}, errors.New("no algorithm fits the workspace")
		}
	} else {
		var err error
		if cands, err = candidates(w, l, c, wsSize); err != nil {
			return choice{}, err
		}
	}
	var best choice
	bestTime := -1.0
	var errs []error
	for _, ch := range cands {
		if err := c.conv.SetMathType(ch.math); err != nil {
			return choice{}, err
		}
		ms, err := w.timeCandidate(func() error { return w.legacyConv(l, c, ch, x, y, z, ws, wsSize) }, bestTime)
		if err != nil {
			if deviceLost(err) {
				return choice{}, err
			}
			errs = append(errs, fmt.Errorf("algorithm %d: %w", ch.algo, err))
			continue
		}
		if bestTime < 0 || ms < bestTime {
			best, bestTime = ch, ms
		}
	}
	if bestTime >= 0 {
		return best, nil
	}
	// Every candidate failed. If each only waited for the stream behind the
	// gate, it still runs: take the heuristics' first.
	for _, err := range errs {
		if !errors.Is(err, cudadrv.ErrGateExpired) {
			return choice{}, fmt.Errorf("no algorithm ran: %w", errors.Join(errs...))
		}
	}
	return cands[0], nil
}

// asCalled is algorithm r as the forward pass calls it for a convolution
// with or without a ReLU: fused with its bias (and ReLU) when it has a ReLU
// or the algorithm is the implicit precomputed GEMM.
func asCalled(relu bool, r cudnn.AlgoPerf) choice {
	return choice{algo: r.Algo, math: r.MathType, ws: r.Memory, fused: relu || r.Algo == cudnn.AlgoImplicitPrecompGEMM}
}

// choices are the algorithms of top as l's forward pass calls them.
func choices(l *convLayer, top []cudnn.AlgoPerf) []choice {
	out := make([]choice, len(top))
	for i, r := range top {
		out[i] = asCalled(l.relu, r)
	}
	return out
}

// heuristics is cuDNN's ranking of algorithms for convolution c of l, each
// with the exact workspace it needs (the heuristics may under-report it), or
// its error.
func heuristics(w *worker, l *convLayer, c *convPlan) ([]cudnn.AlgoPerf, error) {
	res, err := w.dnn.ConvForwardHeuristics(c.x, l.filter, c.conv, c.y)
	if err != nil {
		return nil, err
	}
	for i := range res {
		if res[i].Err != nil {
			continue
		}
		if err := c.conv.SetMathType(res[i].MathType); err != nil {
			return nil, err
		}
		if res[i].Memory, err = w.dnn.ConvForwardWorkspace(c.x, l.filter, c.conv, c.y, res[i].Algo); err != nil {
			res[i].Err = err
		}
	}
	return res, nil
}

// candidates lists, in the heuristics' order, the first quickTopK distinct
// algorithms (with their math type) that accept l and need at most limit
// bytes of workspace, and then the implicit precomputed GEMM algorithm if it
// was not among them (the one a convolution without ReLU fuses with). Each is
// fused when forward would fuse it.
//
// For half-precision data only tensor-op math runs on tensor cores, and the
// heuristics also rank default-math variants, which run far slower and take
// long to time at large batches. Those are left out unless nothing else is
// proposed.
func candidates(w *worker, l *convLayer, c *convPlan, limit uintptr) ([]choice, error) {
	res, err := heuristics(w, l, c)
	if err != nil {
		return nil, err
	}
	if w.e.net.dataType == cudnn.Half && w.e.net.math == cudnn.TensorOpMath {
		tensor := slices.DeleteFunc(slices.Clone(res), func(r cudnn.AlgoPerf) bool { return r.MathType != cudnn.TensorOpMath })
		if top := timedTopK(tensor, limit, quickTopK); len(top) > 0 {
			return choices(l, top), nil
		}
	}
	if top := timedTopK(res, limit, quickTopK); len(top) > 0 {
		return choices(l, top), nil
	}
	return nil, errors.New("no algorithm fits the workspace")
}

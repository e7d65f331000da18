//go:build cuda && linux && cgo

package cudnn

import (
	"errors"
	"fmt"
	"slices"
)

// FusedConv is one convolution with its epilogue, as an operation graph of
// cuDNN's backend API:
//
//	y = ReLU?( conv(x, w) + bias (+ z) )
//
// x, w, bias, z and y are in Data; the convolution's output and the sums
// between the operations are virtual tensors in Compute, never stored.
type FusedConv struct {
	N, C, H, W int // input images, channels, height, width
	K, R       int // output channels; the kernel is R x R
	OutH, OutW int
	Pad        int // on every side
	Stride     int
	Format     Format   // of x, w, z and y (NHWC: weights are KRSC)
	Data       DataType // of x, w, bias, z and y
	Compute    DataType // of the accumulation and the epilogue
	ReLU       bool
	Residual   bool // add z, a tensor of y's shape
}

// Unique IDs of the tensors in an operation graph and its variant packs.
const (
	uidX int64 = iota + 1
	uidW
	uidB
	uidZ
	uidY
	uidConv
	uidBias
	uidSum
)

// strides returns the strides of an n x c x h x w tensor in format f, in the
// backend API's n, c, h, w dimension order.
func strides(f Format, c, h, w int) []int64 {
	if f == NHWC {
		return []int64{int64(c * h * w), 1, int64(w * c), int64(c)}
	}
	return []int64{int64(c * h * w), int64(h * w), int64(w), 1}
}

// FusedGraph is a finalized operation graph of a FusedConv and the engine
// configurations cuDNN's heuristics proposed for it, best first. It belongs
// to the handle it was made with; one goroutine uses it at a time.
type FusedGraph struct {
	lib   *Lib
	descs []Desc // every descriptor made, destroyed by Destroy
	// Configs are the engine configurations, ranked by the heuristics.
	Configs []EngineConfig
}

// EngineConfig is one engine configuration of a FusedGraph.
type EngineConfig struct {
	cfg    Desc
	Engine int64           // the engine's global index
	Notes  []NumericalNote // its numerical notes
	// RuntimeCompiled is set when cuDNN compiles the engine's kernel when a
	// plan is finalized (runtime fusion).
	RuntimeCompiled bool
}

// Destroy releases every descriptor of the graph; plans made from it stay valid.
func (g *FusedGraph) Destroy() {
	for _, d := range g.descs {
		d.Destroy()
	}
	g.descs, g.Configs = nil, nil
}

// NewFusedGraph builds f's operation graph on h and asks the heuristics of mode
// for engine configurations.
func (l *Lib) NewFusedGraph(h Handle, f FusedConv, mode HeurMode) (*FusedGraph, error) {
	g := &FusedGraph{lib: l}
	ok := false
	defer func() {
		if !ok {
			g.Destroy()
		}
	}()
	var errs []error
	set := func(err error) { errs = append(errs, err) }
	desc := func(t DescType) Desc {
		d, err := l.NewDesc(t)
		set(err)
		g.descs = append(g.descs, d)
		return d
	}
	done := func(what string, d Desc) error {
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("cudnn: %s: %w", what, err)
		}
		if err := d.Finalize(); err != nil {
			return fmt.Errorf("cudnn: finalize %s: %w", what, err)
		}
		return nil
	}
	tensor := func(uid int64, dt DataType, virtual bool, n, c, hh, w int, st []int64) (Desc, error) {
		d := desc(DescTensor)
		if d.IsZero() {
			return d, errors.Join(errs...)
		}
		set(d.SetEnum(AttrTensorDataType, TypeDataType, int(dt)))
		set(d.SetInt64s(AttrTensorDimensions, int64(n), int64(c), int64(hh), int64(w)))
		set(d.SetInt64s(AttrTensorStrides, st...))
		set(d.SetInt64s(AttrTensorUniqueID, uid))
		set(d.SetInt64s(AttrTensorByteAlignment, 16))
		set(d.SetBool(AttrTensorIsVirtual, virtual))
		return d, done(fmt.Sprintf("tensor %d", uid), d)
	}
	ys := strides(f.Format, f.K, f.OutH, f.OutW)
	x, err := tensor(uidX, f.Data, false, f.N, f.C, f.H, f.W, strides(f.Format, f.C, f.H, f.W))
	if err != nil {
		return nil, err
	}
	w, err := tensor(uidW, f.Data, false, f.K, f.C, f.R, f.R, strides(f.Format, f.C, f.R, f.R))
	if err != nil {
		return nil, err
	}
	b, err := tensor(uidB, f.Data, false, 1, f.K, 1, 1, strides(f.Format, f.K, 1, 1))
	if err != nil {
		return nil, err
	}
	y, err := tensor(uidY, f.Data, false, f.N, f.K, f.OutH, f.OutW, ys)
	if err != nil {
		return nil, err
	}
	conv, err := tensor(uidConv, f.Compute, true, f.N, f.K, f.OutH, f.OutW, ys)
	if err != nil {
		return nil, err
	}

	cd := desc(DescConvolution)
	if cd.IsZero() {
		return nil, errors.Join(errs...)
	}
	set(cd.SetEnum(AttrConvCompType, TypeDataType, int(f.Compute)))
	set(cd.SetEnum(AttrConvMode, TypeConvMode, int(CrossCorrelation)))
	set(cd.SetInt64s(AttrConvSpatialDims, 2))
	set(cd.SetInt64s(AttrConvDilations, 1, 1))
	set(cd.SetInt64s(AttrConvFilterStrides, int64(f.Stride), int64(f.Stride)))
	set(cd.SetInt64s(AttrConvPrePaddings, int64(f.Pad), int64(f.Pad)))
	set(cd.SetInt64s(AttrConvPostPaddings, int64(f.Pad), int64(f.Pad)))
	if err := done("convolution", cd); err != nil {
		return nil, err
	}
	convOp := desc(DescOpConvForward)
	if convOp.IsZero() {
		return nil, errors.Join(errs...)
	}
	set(convOp.SetDescs(AttrConvFwdX, x))
	set(convOp.SetDescs(AttrConvFwdW, w))
	set(convOp.SetDescs(AttrConvFwdY, conv))
	set(convOp.SetDescs(AttrConvFwdConvDesc, cd))
	set(convOp.SetFloat(AttrConvFwdAlpha, 1))
	set(convOp.SetFloat(AttrConvFwdBeta, 0))
	if err := done("convolution operation", convOp); err != nil {
		return nil, err
	}
	ops := []Desc{convOp}

	// pointwise appends out = mode(in, second) (second may be zero for ReLU).
	pointwise := func(mode PointwiseMode, in, second, out Desc) error {
		pd := desc(DescPointwise)
		if pd.IsZero() {
			return errors.Join(errs...)
		}
		set(pd.SetEnum(AttrPointwiseMode, TypePointwiseMode, int(mode)))
		set(pd.SetEnum(AttrPointwiseMathPrec, TypeDataType, int(f.Compute)))
		if err := done("pointwise", pd); err != nil {
			return err
		}
		op := desc(DescOpPointwise)
		if op.IsZero() {
			return errors.Join(errs...)
		}
		set(op.SetDescs(AttrPointwiseOpDesc, pd))
		set(op.SetDescs(AttrPointwiseOpX, in))
		if !second.IsZero() {
			set(op.SetDescs(AttrPointwiseOpB, second))
		}
		set(op.SetDescs(AttrPointwiseOpY, out))
		if err := done("pointwise operation", op); err != nil {
			return err
		}
		ops = append(ops, op)
		return nil
	}
	// The chain: conv -> +bias -> (+z) -> (ReLU) -> y; the last step writes y.
	last := func(isLast bool, uid int64) (Desc, error) {
		if isLast {
			return y, nil
		}
		return tensor(uid, f.Compute, true, f.N, f.K, f.OutH, f.OutW, ys)
	}
	cur := conv
	out, err := last(!f.Residual && !f.ReLU, uidBias)
	if err != nil {
		return nil, err
	}
	if err := pointwise(PointwiseAdd, cur, b, out); err != nil {
		return nil, err
	}
	cur = out
	if f.Residual {
		z, err := tensor(uidZ, f.Data, false, f.N, f.K, f.OutH, f.OutW, ys)
		if err != nil {
			return nil, err
		}
		if out, err = last(!f.ReLU, uidSum); err != nil {
			return nil, err
		}
		if err := pointwise(PointwiseAdd, cur, z, out); err != nil {
			return nil, err
		}
		cur = out
	}
	if f.ReLU {
		if err := pointwise(PointwiseReLU, cur, Desc{}, y); err != nil {
			return nil, err
		}
	}

	graph := desc(DescOperationGraph)
	if graph.IsZero() {
		return nil, errors.Join(errs...)
	}
	set(graph.SetHandle(AttrGraphHandle, h))
	set(graph.SetDescs(AttrGraphOps, ops...))
	if err := done("operation graph", graph); err != nil {
		return nil, err
	}
	heur := desc(DescEngineHeur)
	if heur.IsZero() {
		return nil, errors.Join(errs...)
	}
	set(heur.SetDescs(AttrHeurOperationGraph, graph))
	set(heur.SetEnum(AttrHeurMode, TypeHeurMode, int(mode)))
	if err := done("engine heuristics", heur); err != nil {
		return nil, err
	}
	n, err := heur.Count(AttrHeurResults)
	if err != nil {
		return nil, fmt.Errorf("cudnn: heuristics results: %w", err)
	}
	cfgs := make([]Desc, n)
	for i := range cfgs {
		cfgs[i] = desc(DescEngineCfg)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("cudnn: engine configurations: %w", err)
	}
	if n, err = heur.Descs(AttrHeurResults, cfgs); err != nil {
		return nil, fmt.Errorf("cudnn: heuristics results: %w", err)
	}
	for _, c := range cfgs[:n] {
		ec := EngineConfig{cfg: c, Engine: -1}
		eng := desc(DescEngine)
		if eng.IsZero() {
			return nil, errors.Join(errs...)
		}
		if k, err := c.Descs(AttrEngineCfgEngine, []Desc{eng}); err == nil && k == 1 {
			if v, err := eng.Int64(AttrEngineGlobalIndex); err == nil {
				ec.Engine = v
			}
			if notes, err := eng.Enums(AttrEngineNumericalNote, TypeNumericalNote, 16); err == nil {
				for _, v := range notes {
					ec.Notes = append(ec.Notes, NumericalNote(v))
				}
			}
			if notes, err := eng.Enums(AttrEngineBehaviorNote, TypeBehaviorNote, 16); err == nil {
				ec.RuntimeCompiled = slices.Contains(notes, BehaviorNoteRuntimeCompilation)
			}
		}
		g.Configs = append(g.Configs, ec)
	}
	ok = true
	return g, nil
}

// Plan is a finalized execution plan of one engine configuration, bound to the
// handle that made it. One goroutine uses it at a time.
type Plan struct {
	lib       *Lib
	plan      Desc
	residual  bool
	Workspace uintptr // bytes of workspace Run needs
	packs     map[[6]uintptr]Desc
}

// NewPlan finalizes an execution plan of c on h (for engines that compile at
// run time, this compiles their kernel).
func (l *Lib) NewPlan(h Handle, f FusedConv, c EngineConfig) (*Plan, error) {
	d, err := l.NewDesc(DescExecutionPlan)
	if err != nil {
		return nil, err
	}
	err = errors.Join(d.SetHandle(AttrPlanHandle, h), d.SetDescs(AttrPlanEngineConfig, c.cfg))
	if err == nil {
		err = d.Finalize()
	}
	var ws int64
	if err == nil {
		ws, err = d.Int64(AttrPlanWorkspaceSize)
	}
	if err != nil {
		d.Destroy()
		return nil, fmt.Errorf("cudnn: execution plan of engine %d: %w", c.Engine, err)
	}
	return &Plan{lib: l, plan: d, residual: f.Residual, Workspace: uintptr(ws), packs: map[[6]uintptr]Desc{}}, nil
}

// Destroy releases the plan and its variant packs; nil is ignored.
func (p *Plan) Destroy() {
	if p == nil {
		return
	}
	for _, d := range p.packs {
		d.Destroy()
	}
	p.plan.Destroy()
	p.packs = nil
}

// Run enqueues the plan on h's stream with device buffers x, w, bias, z (used
// only with FusedConv.Residual) and y, and ws, at least p.Workspace bytes. The
// variant pack of each set of addresses is made once and kept.
func (h Handle) Run(p *Plan, x, w, bias, z, y, ws uintptr) error {
	key := [6]uintptr{x, w, bias, z, y, ws}
	pack, ok := p.packs[key]
	if !ok {
		var err error
		if pack, err = p.newPack(key); err != nil {
			return err
		}
		p.packs[key] = pack
	}
	return h.Execute(p.plan, pack)
}

func (p *Plan) newPack(k [6]uintptr) (Desc, error) {
	d, err := p.lib.NewDesc(DescVariantPack)
	if err != nil {
		return Desc{}, err
	}
	uids := []int64{uidX, uidW, uidB, uidY}
	ptrs := []uintptr{k[0], k[1], k[2], k[4]}
	if p.residual {
		uids, ptrs = append(uids, uidZ), append(ptrs, k[3])
	}
	err = errors.Join(d.SetInt64s(AttrPackUniqueIDs, uids...), d.SetPointers(AttrPackDataPointers, ptrs...),
		d.SetPointers(AttrPackWorkspace, k[5]))
	if err == nil {
		err = d.Finalize()
	}
	if err != nil {
		d.Destroy()
		return Desc{}, fmt.Errorf("cudnn: variant pack: %w", err)
	}
	return d, nil
}

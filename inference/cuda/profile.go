//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
)

// Step is one step of a profiled forward pass: a layer or a conversion, with
// the library call or kernel that runs it and the device time it took.
type Step struct {
	Name  string        // "input", "stem", "max-pool", "block 3 conv2", ...
	Shape string        // input -> output, per image (C x H x W), and the filter for convolutions
	Call  string        // the library call (with the chosen algorithm) or kernel
	Time  time.Duration // median device time over the profiled passes
}

// Profile is the per-step device time of one forward pass.
type Profile struct {
	Batch  int
	Uint8  bool          // the input was uint8 bytes (else float32)
	Passes int           // passes measured; each Step.Time is their median
	Steps  []Step        // in execution order
	Total  time.Duration // median of the whole pass (first to last event)
}

// profiler records an event after each step of a forward pass on the compute
// stream (worker.mark); the time between two consecutive events is the
// device time of the step between them.
type profiler struct {
	start  cudadrv.Event
	events []cudadrv.Event // grown as steps are marked; reused across passes
	steps  []Step          // the steps marked in this pass (Time unset)
}

// mark records the end of a step of the forward pass when the worker is
// being profiled, and does nothing otherwise.
func (w *worker) mark(name, shape, call string) error {
	pr := w.prof
	if pr == nil {
		return nil
	}
	i := len(pr.steps)
	if i == len(pr.events) {
		ev, err := cudadrv.NewEvent()
		if err != nil {
			return err
		}
		pr.events = append(pr.events, ev)
	}
	pr.steps = append(pr.steps, Step{Name: name, Shape: shape, Call: call})
	return pr.events[i].Record(w.comp)
}

// profileForward runs passes forward passes of p on slot 0 with library calls
// (no graph), an event after every step, and returns each step's median time.
// Each pass is enqueued behind a gate, as in timeForward, so the device runs
// it back to back and host enqueue time is not counted. uint8 selects the
// slot's uint8 input (normalised on the device). Nothing else may use the
// worker meanwhile.
func (w *worker) profileForward(n int, uint8 bool, passes int) (*Profile, error) {
	if passes < 1 {
		return nil, fmt.Errorf("cuda: profile of %d passes", passes)
	}
	out := &Profile{Batch: n, Uint8: uint8, Passes: passes}
	err := withContext(w.dev, func() (err error) {
		p, err := w.e.plans.planFor(n, w)
		if err != nil {
			return err
		}
		s := &w.slots[0]
		in := inputRef{f32: s.in}
		if uint8 {
			in.u8 = s.inU8
		}
		pr := &profiler{}
		if pr.start, err = cudadrv.NewEvent(); err != nil {
			return err
		}
		w.prof = pr
		defer func() {
			w.prof = nil
			errs := []error{err, pr.start.Destroy()}
			for _, ev := range pr.events {
				errs = append(errs, ev.Destroy())
			}
			err = errors.Join(errs...)
		}()
		var times [][]time.Duration // [step][pass]
		var totals []time.Duration
		for range passes {
			pr.steps = pr.steps[:0]
			err := w.gated(func() error { return errors.Join(pr.start.Record(w.comp), w.forward(p, in, s.outDev)) })
			if err != nil {
				return err
			}
			if times == nil {
				times = make([][]time.Duration, len(pr.steps))
				out.Steps = slices.Clone(pr.steps)
			} else if len(pr.steps) != len(times) {
				return fmt.Errorf("cuda: profile: a pass of %d steps after one of %d", len(pr.steps), len(times))
			}
			prev := pr.start
			for i := range pr.steps {
				d, err := pr.events[i].Since(prev)
				if err != nil {
					return err
				}
				times[i] = append(times[i], d)
				prev = pr.events[i]
			}
			total, err := prev.Since(pr.start)
			if err != nil {
				return err
			}
			totals = append(totals, total)
		}
		for i := range out.Steps {
			out.Steps[i].Time = median(times[i])
		}
		out.Total = median(totals)
		return nil
	})
	if err != nil {
		return nil, w.wrap(fmt.Sprintf("profile of batch %d", n), err)
	}
	return out, nil
}

// median is the middle value of d (the upper one of an even count); d is
// sorted in place.
func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// algoNames are cuDNN's forward convolution algorithms, by value.
var algoNames = []string{"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"}

// convStep describes convolution l as planned in c for a profile.
func convStep(l *convLayer, c *convPlan) (shape, call string) {
	shape = fmt.Sprintf("%dx%dx%d -> %dx%dx%d, %dx%d/%d", l.in, l.inH, l.inW, l.out, l.outH, l.outW, l.k, l.k, l.stride)
	algo := fmt.Sprint(int(c.algo))
	if int(c.algo) >= 0 && int(c.algo) < len(algoNames) {
		algo = algoNames[c.algo]
	}
	if c.graph != nil {
		return shape, fmt.Sprintf("cudnnBackendExecute fused graph, engine %d (heuristics rank %d)", c.graph.engine, c.graph.rank)
	}
	if c.fused {
		return shape, "cudnnConvolutionBiasActivationForward " + algo
	}
	return shape, "cudnnConvolutionForward " + algo + " + cudnnAddTensor"
}

// markConv marks the end of convolution l (see mark).
func (w *worker) markConv(p *plan, l *convLayer) error {
	if w.prof == nil {
		return nil
	}
	shape, call := convStep(l, &p.convs[l.index])
	return w.mark(convName(w.e.net, l.index), shape, call)
}

// convName names convolution i of net: "stem", "block B conv1", "block B
// conv2" or "block B shortcut".
func convName(net *network, i int) string {
	if i == 0 {
		return "stem"
	}
	for b, bl := range net.blocks {
		for _, c := range []struct {
			l    *convLayer
			name string
		}{{bl.conv1, "conv1"}, {bl.conv2, "conv2"}, {bl.down, "shortcut"}} {
			if c.l != nil && c.l.index == i {
				return fmt.Sprintf("block %d %s", b, c.name)
			}
		}
	}
	return fmt.Sprintf("convolution %d", i)
}

// markInput marks the end of the input conversion (see convertInput).
func (w *worker) markInput(src inputRef) error {
	if w.prof == nil {
		return nil
	}
	net := w.e.net
	shape := fmt.Sprintf("3x%dx%d", w.e.opts.Height, w.e.opts.Width)
	switch {
	case src.u8 != 0:
		return w.mark("input", shape+" uint8 -> "+netInput(net), kernelName(true, net))
	case !net.transform:
		return w.mark("input", shape+" float NCHW, read as is", "none")
	case w.e.inputKernel:
		return w.mark("input", shape+" float NCHW -> "+netInput(net), kernelName(false, net))
	}
	return w.mark("input", shape+" float NCHW -> "+netInput(net), "cudnnTransformTensor")
}

// netInput names the network's input layout and type, and the
// space-to-depth input's shape for the s2d stem.
func netInput(net *network) string {
	t := "float"
	if net.elem == 2 {
		t = "half"
	}
	if net.stem == stemS2D {
		s := net.convs[0]
		return fmt.Sprintf("%s NHWC space-to-depth %dx%dx%d", t, s.in, s.inH, s.inW)
	}
	if net.format == cudnn.NHWC {
		return t + " NHWC"
	}
	return t + " NCHW"
}

// markLayer marks the end of a step other than a convolution or the input
// conversion.
func (w *worker) markLayer(name, call string) error {
	if w.prof == nil {
		return nil
	}
	net, shape := w.e.net, ""
	switch name {
	case "max-pool":
		shape = fmt.Sprintf("%dx%dx%d -> %dx%dx%d", net.convs[0].out, net.convs[0].outH, net.convs[0].outW, net.convs[0].out, net.poolH, net.poolW)
	case "average pool":
		shape = fmt.Sprintf("%dx%dx%d -> %d", net.feat, net.lastH, net.lastW, net.feat)
	case "classifier":
		shape = fmt.Sprintf("%d -> %d", net.feat, net.classes)
	}
	return w.mark(name, shape, call)
}

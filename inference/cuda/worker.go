//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
)

// worker is one compute lane: its streams, library handles, activation buffers
// and workspace, and Slots batches in flight.
type worker struct {
	e   *engine
	id  int
	dev *device

	in, comp, out cudadrv.Stream // the same stream in the Serial pipeline
	overlap       bool
	dnn           cudnn.Handle

	x      uintptr    // the input converted to the network's layout and type (network.transform)
	stem   uintptr    // stem output, MaxBatch images
	act    [4]uintptr // block activations, MaxBatch images each
	feat   uintptr    // average-pool output, float32 whatever the precision
	ws     uintptr
	wsSize uintptr

	slots []slot
	fused map[cudnn.FusedConv]*fusedExec // backend-API plans of graph convolutions (convgraph.go)
	mem   []uintptr                      // device allocations to free

	graphs []map[captureKey]cudadrv.Exec // per slot: the captured forward passes (Options.Graphs)
	beside beside                        // shortcuts beside conv1 in the graphs (beside.go)
	prof   *profiler                     // set while profileForward runs: forward marks its steps
}

// captureKey names a captured forward pass: its batch size and input type.
type captureKey struct {
	n     int
	uint8 bool
}

// slot is one batch in flight.
type slot struct {
	in      uintptr   // device input, MaxBatch images
	stage   []float32 // pinned staging buffer for the input
	staging copyGroup // copies into stage or stageU8 in progress
	// sendIn enqueues a copy of values from host memory to in on the worker's
	// copy-in stream (see inputCopy.send).
	sendIn func(off int, src unsafe.Pointer, n int) error
	// The same for uint8 input (CopyInUint8): device bytes, pinned staging
	// buffer, copy; uint8 says the slot's current batch is uint8.
	inU8    uintptr
	stageU8 []uint8
	sendU8  func(off int, src unsafe.Pointer, n int) error
	uint8   bool

	outDev uintptr   // device logits
	out    []float32 // pinned host logits
	n      int       // images copied in
	ran    int       // the batch size the last Compute ran at
	graph  bool      // the last Compute was a graph launch

	// Events: copy-in start/end, compute start/end, copy-out start/end, and
	// evEnq, recorded on the device's idle stream once the host has enqueued
	// the forward pass (see splitSpan).
	evIn0, evIn1, evComp0, evComp1, evOut0, evOut1, evEnq cudadrv.Event
}

// events lists the slot's events, for making and destroying them.
func (s *slot) events() []*cudadrv.Event {
	return []*cudadrv.Event{&s.evIn0, &s.evIn1, &s.evComp0, &s.evComp1, &s.evOut0, &s.evOut1, &s.evEnq}
}

// input returns the device input of the slot's current batch.
func (s *slot) input() inputRef {
	if s.uint8 {
		return inputRef{f32: s.in, u8: s.inU8}
	}
	return inputRef{f32: s.in}
}

// inputRef is the device input of a forward pass: float32 NCHW values at f32,
// or, when u8 is not 0, uint8 NCHW bytes at u8 (f32 is then the slot's float
// buffer, which an fp32 NCHW network converts them into).
type inputRef struct{ f32, u8 uintptr }

// allocDevice returns bytes of zeroed device memory in the current context.
func allocDevice(bytes int) (uintptr, error) {
	p, err := cudadrv.MemAlloc(bytes)
	if err != nil {
		return 0, err
	}
	if err := cudadrv.MemsetD8(p, 0, bytes); err != nil {
		return 0, errors.Join(err, cudadrv.MemFree(p))
	}
	return p, nil
}

func hostFloats(n int) ([]float32, error) {
	p, err := cudadrv.HostAlloc(4 * n)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*float32)(p), n), nil
}

func newWorker(e *engine, id int, d *device) (*worker, error) {
	w := &worker{e: e, id: id, dev: d, overlap: e.opts.Pipeline == backend.Overlap}
	err := withContext(d, w.init)
	return w, w.wrap("set-up", err)
}

func (w *worker) alloc(bytes int) (uintptr, error) {
	p, err := allocDevice(bytes)
	if err != nil {
		return 0, err
	}
	w.mem = append(w.mem, p)
	return p, nil
}

// init makes the worker's streams, library handles, device buffers, events
// and page-locked host buffers, timing the cuDNN handle, the device buffers
// and the host buffers as sub-steps of init.
func (w *worker) init() error {
	err := w.e.clock.timeWhat("init.cudnn-handles", w.what(), func() error {
		if err := w.makeStreams(); err != nil {
			return err
		}
		var err error
		if w.dnn, err = w.e.dnn.Create(); err != nil {
			return err
		}
		return w.dnn.SetStream(w.comp.Pointer())
	})
	if err != nil {
		return err
	}
	if err := w.e.clock.timeWhat("init.buffers", w.what(), w.makeBuffers); err != nil {
		return err
	}
	return w.e.clock.timeWhat("init.pin", w.what(), func() error {
		for i := range w.slots {
			if err := w.pinSlot(i); err != nil {
				return err
			}
		}
		return nil
	})
}

// makeStreams makes the worker's streams: one, or three for Overlap.
func (w *worker) makeStreams() error {
	var err error
	if w.comp, err = cudadrv.NewStream(); err != nil {
		return err
	}
	w.in, w.out = w.comp, w.comp
	if w.overlap {
		if w.in, err = cudadrv.NewStream(); err != nil {
			return err
		}
		if w.out, err = cudadrv.NewStream(); err != nil {
			return err
		}
	}
	return nil
}

// makeBuffers allocates the device buffers and the slots' events.
func (w *worker) makeBuffers() error {
	o, net := w.e.opts, w.e.net
	var err error
	b, el := o.MaxBatch, net.elem
	per := 3 * o.Height * o.Width
	if net.transform {
		if w.x, err = w.alloc(el * b * net.stemInput()); err != nil {
			return err
		}
	}
	if w.stem, err = w.alloc(el * b * net.stemSize); err != nil {
		return err
	}
	for i := range w.act {
		if w.act[i], err = w.alloc(el * b * net.actSize); err != nil {
			return err
		}
	}
	if w.feat, err = w.alloc(4 * b * net.feat); err != nil {
		return err
	}
	w.slots = make([]slot, o.Slots)
	for i := range w.slots {
		s := &w.slots[i]
		if s.in, err = w.alloc(4 * b * per); err != nil {
			return err
		}
		s.sendIn = func(off int, src unsafe.Pointer, n int) error {
			return cudadrv.MemcpyHtoDAsync(s.in+uintptr(4*off), src, 4*n, w.in)
		}
		if s.inU8, err = w.alloc(b * per); err != nil {
			return err
		}
		s.sendU8 = func(off int, src unsafe.Pointer, n int) error {
			return cudadrv.MemcpyHtoDAsync(s.inU8+uintptr(off), src, n, w.in)
		}
		if s.outDev, err = w.alloc(4 * b * net.classes); err != nil {
			return err
		}
		for _, ev := range s.events() {
			if *ev, err = cudadrv.NewEvent(); err != nil {
				return err
			}
		}
	}
	return nil
}

// pinSlot makes slot i's page-locked host buffers: its staging buffers for
// float32 and uint8 input (unless Options.PinnedInput) and its logits.
func (w *worker) pinSlot(i int) error {
	o, s := w.e.opts, &w.slots[i]
	n := o.MaxBatch * 3 * o.Height * o.Width
	var err error
	if !o.PinnedInput {
		if s.stage, err = hostFloats(n); err != nil {
			return err
		}
		p, err := cudadrv.HostAlloc(n)
		if err != nil {
			return err
		}
		s.stageU8 = unsafe.Slice((*uint8)(p), n)
	}
	s.out, err = hostFloats(o.MaxBatch * w.e.net.classes)
	return err
}

// capture records the forward pass of every prepared batch size for every slot
// and both input types (float32, uint8) into a CUDA graph, and uploads each
// graph to the device without running it.
func (w *worker) capture() error {
	clock := w.e.clock
	return withContext(w.dev, func() error {
		w.graphs = make([]map[captureKey]cudadrv.Exec, len(w.slots))
		if err := w.makeBeside(); err != nil {
			return w.wrap("side stream", err)
		}
		w.beside.on = true
		defer func() { w.beside.on = false }()
		keys := w.graphKeys()
		if w.id%2 == 1 {
			// Odd workers record the batch sizes largest first, so that
			// the first launches of different kernels (their lazy
			// loading, most of a capture) happen at once in two workers.
			slices.Reverse(keys)
		}
		for i := range w.slots {
			s := &w.slots[i]
			w.graphs[i] = map[captureKey]cudadrv.Exec{}
			for _, k := range keys {
				n := k.n
				in := inputRef{f32: s.in}
				if k.uint8 {
					in.u8 = s.inU8
				}
				var g cudadrv.Graph
				// The first slot's recording of a pass apart from the
				// others' (the same calls over other buffers): what a
				// recording shared by the slots would save.
				record := "capture.record.first-slot"
				if i > 0 {
					record = "capture.record.other-slots"
				}
				what := fmt.Sprintf("worker %d slot %d batch %d", w.id, i, n)
				if k.uint8 {
					what += " uint8"
				}
				err := clock.timeWhat(record, what, func() error {
					if err := cudadrv.BeginCapture(w.comp); err != nil {
						return err
					}
					ferr := w.forward(w.e.plans.prepared(n), in, s.outDev)
					var err error
					g, err = cudadrv.EndCapture(w.comp)
					return errors.Join(ferr, err)
				})
				if err != nil {
					return w.wrap(fmt.Sprintf("capture of batch %d", n), errors.Join(err, g.Destroy()))
				}
				var exec cudadrv.Exec
				err = clock.timeWhat("capture.instantiate", what, func() (err error) {
					exec, err = g.Instantiate()
					return errors.Join(err, g.Destroy())
				})
				if err != nil {
					return w.wrap("capture", errors.Join(err, exec.Destroy()))
				}
				w.graphs[i][k] = exec
				if err := clock.time("capture.upload", func() error { return exec.Upload(w.comp) }); err != nil {
					return w.wrap("graph upload", err)
				}
			}
		}
		return w.wrap("graph upload", clock.time("capture.upload", w.comp.Synchronize))
	})
}

// graphKeys lists the forward passes capture records for each slot.
func (w *worker) graphKeys() []captureKey {
	var keys []captureKey
	for _, n := range w.e.opts.Batches {
		keys = append(keys, captureKey{n, false}, captureKey{n, true})
	}
	return keys
}

// what names the worker in the set-up timeline.
func (w *worker) what() string { return fmt.Sprint("worker ", w.id) }

// allocWorkspace gives the worker n bytes of convolution workspace.
func (w *worker) allocWorkspace(n uintptr) error {
	return w.wrap("workspace", withContext(w.dev, func() error {
		var err error
		w.wsSize = max(n, 1<<20)
		w.ws, err = w.alloc(int(w.wsSize))
		return err
	}))
}

// prime runs the worker's first forward pass of every prepared batch size, on
// slot 0 and the way Compute runs it (its graph, with Options.Graphs).
func (w *worker) prime() error {
	return withContext(w.dev, func() error {
		for _, n := range w.e.opts.Batches {
			if _, err := w.enqueueForward(0, w.e.plans.prepared(n)); err != nil {
				return w.wrap(fmt.Sprintf("warm-up pass of batch %d", n), err)
			}
		}
		return w.wrap("warm-up passes", w.comp.Synchronize())
	})
}

func (w *worker) close() error {
	return withContext(w.dev, func() error {
		var errs []error
		if !w.comp.IsZero() {
			errs = append(errs, w.comp.Synchronize())
		}
		if w.overlap {
			for _, s := range []cudadrv.Stream{w.in, w.out} {
				if !s.IsZero() {
					errs = append(errs, s.Synchronize(), s.Destroy())
				}
			}
		}
		for _, f := range w.fused {
			f.destroy()
		}
		w.fused = nil
		errs = append(errs, w.destroyBeside(), w.dnn.Destroy())
		if !w.comp.IsZero() {
			errs = append(errs, w.comp.Destroy())
		}
		w.in, w.comp, w.out = cudadrv.Stream{}, cudadrv.Stream{}, cudadrv.Stream{}
		for i := range w.slots {
			s := &w.slots[i]
			for _, ev := range s.events() {
				if !ev.IsZero() {
					errs = append(errs, ev.Destroy())
					*ev = cudadrv.Event{}
				}
			}
			for _, h := range [][]float32{s.stage, s.out} {
				if len(h) > 0 {
					errs = append(errs, cudadrv.HostFree(unsafe.Pointer(&h[0])))
				}
			}
			if len(s.stageU8) > 0 {
				errs = append(errs, cudadrv.HostFree(unsafe.Pointer(&s.stageU8[0])))
			}
		}
		w.slots = nil
		for _, m := range w.graphs {
			for _, g := range m {
				errs = append(errs, g.Destroy())
			}
		}
		w.graphs = nil
		for _, p := range w.mem {
			errs = append(errs, cudadrv.MemFree(p))
		}
		w.mem = nil
		return errors.Join(errs...)
	})
}

// Bind locks the calling goroutine to its OS thread and makes the worker's
// device context current there. If the context cannot be made current, it
// unlocks the thread again and returns the driver's error.
func (w *worker) Bind() (release func(), err error) {
	runtime.LockOSThread()
	if err := cudadrv.SetCurrentContext(w.dev.ctx); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("cuda: making device %d's context current: %w", w.dev.ordinal, err)
	}
	return runtime.UnlockOSThread, nil
}

// Slots is Options.Slots.
func (w *worker) Slots() int { return len(w.slots) }

// Device is the worker's device ordinal.
func (w *worker) Device() int { return w.dev.ordinal }

// Output is slot's pinned host buffer of logits.
func (w *worker) Output(slot int) []float32 { return w.slots[slot].out }

// CopyIn starts the host-to-device copy of parts into slot. Parts inside memory
// from AllocHost are copied directly; others go through the slot's pinned
// staging buffer (copied there by several goroutines when large); inputCopy
// says how and why the result is right.
func (w *worker) CopyIn(slot int, parts [][]float32) error {
	s, err := beginCopyIn(w, slot, parts, false)
	if err != nil {
		return err
	}
	return enqueueCopyIn(w, s, parts, inputCopy[float32]{send: s.sendIn, stage: s.stage, staging: &s.staging, copier: w.e.copier})
}

// CopyInUint8 is CopyIn for uint8 images (backend.Uint8Worker): a quarter of
// the bytes cross the bus, and Compute normalises them on the device with
// Options.Normalization before the stem.
func (w *worker) CopyInUint8(slot int, parts [][]uint8) error {
	s, err := beginCopyIn(w, slot, parts, true)
	if err != nil {
		return err
	}
	return enqueueCopyIn(w, s, parts, inputCopy[uint8]{send: s.sendU8, stage: s.stageU8, staging: &s.staging, copier: w.e.copier})
}

// beginCopyIn checks slot i and parts and records in the slot how many
// images it is to hold and whether they are uint8.
func beginCopyIn[T float32 | uint8](w *worker, i int, parts [][]T, isUint8 bool) (*slot, error) {
	if i < 0 || i >= len(w.slots) {
		return nil, fmt.Errorf("cuda: slot %d of %d", i, len(w.slots))
	}
	s := &w.slots[i]
	total, err := countImages(w, parts)
	if err != nil {
		return nil, err
	}
	s.n, s.uint8 = total, isUint8
	return s, nil
}

// countImages checks that parts hold whole images, 1 to MaxBatch of them, and
// returns how many.
func countImages[T float32 | uint8](w *worker, parts [][]T) (int, error) {
	per := 3 * w.e.opts.Height * w.e.opts.Width
	total := 0
	for _, p := range parts {
		if len(p)%per != 0 {
			return 0, fmt.Errorf("cuda: part of %d values is not whole %dx%dx3 images", len(p), w.e.opts.Height, w.e.opts.Width)
		}
		total += len(p)
	}
	if total == 0 || total > w.e.opts.MaxBatch*per {
		return 0, fmt.Errorf("cuda: %d images, want 1 to %d", total/per, w.e.opts.MaxBatch)
	}
	return total / per, nil
}

// enqueueCopyIn enqueues the copies of parts into slot s through c, between the
// slot's copy-in events.
func enqueueCopyIn[T float32 | uint8](w *worker, s *slot, parts [][]T, c inputCopy[T]) error {
	if err := s.evIn0.Record(w.in); err != nil {
		return w.wrap("copy-in", err)
	}
	defer c.finish()
	for _, p := range parts {
		if err := c.add(p, w.e.opts.PinnedInput || w.e.pinned(asBytes(p))); err != nil {
			return w.wrap("copy-in", err)
		}
	}
	if err := c.flush(); err != nil {
		return w.wrap("copy-in", err)
	}
	return w.wrap("copy-in", s.evIn1.Record(w.in))
}

// Compute starts the forward pass of the first n images of slot, after its copy-in.
func (w *worker) Compute(slot, n int) error {
	s := &w.slots[slot]
	if n < 1 || n > s.n {
		return fmt.Errorf("cuda: compute %d images of slot holding %d", n, s.n)
	}
	p, err := w.e.plans.planFor(w.e.plans.runAs[n], w)
	if err != nil {
		return w.wrap("compute", err)
	}
	if w.overlap {
		if err := w.comp.WaitEvent(s.evIn1); err != nil {
			return w.wrap("compute", err)
		}
	}
	if err := s.evComp0.Record(w.comp); err != nil {
		return w.wrap("compute", err)
	}
	graph, err := w.enqueueForward(slot, p)
	if err != nil {
		return w.wrap("compute", err)
	}
	s.ran, s.graph = p.n, graph
	if err := s.evComp1.Record(w.comp); err != nil {
		return w.wrap("compute", err)
	}
	return w.wrap("compute", s.evEnq.Record(w.dev.ref))
}

// enqueueForward enqueues the forward pass of p.n images of slot on the
// compute stream: one launch of the slot's graph for p.n when there is one
// (graph is then true), else forward's library calls.
func (w *worker) enqueueForward(slot int, p *plan) (graph bool, err error) {
	s := &w.slots[slot]
	if w.graphs != nil {
		if g, ok := w.graphs[slot][captureKey{p.n, s.uint8}]; ok {
			return true, g.Launch(w.comp)
		}
	}
	return false, w.forward(p, s.input(), s.outDev)
}

// gated enqueues work on the compute stream behind a gate that opens only
// once enqueue has returned, so the device runs the work back to back and
// the host's enqueue time does not show in it, and waits for the stream.
func (w *worker) gated(enqueue func() error) error { return w.gatedFor(5*time.Second, enqueue) }

// gatedFor is gated with a gate that gives up after limit
// (cudadrv.HoldStreamFor).
func (w *worker) gatedFor(limit time.Duration, enqueue func() error) error {
	g, err := cudadrv.HoldStreamFor(w.comp, limit)
	if err != nil {
		return err
	}
	err = errors.Join(enqueue(), g.Open())
	if serr := w.comp.Synchronize(); serr != nil {
		return errors.Join(err, serr) // the gate may still be in use: leave it
	}
	g.Free()
	return err
}

// timeForward measures the device's own time for the forward pass of p
// (library calls, no graph) on slot 0: the compute stream is held back by a
// gate until the host has enqueued the whole pass, so the device runs it back
// to back, timed by events after the gate and after the pass. It returns the
// median of 5 runs. Nothing else may use the worker meanwhile.
func (w *worker) timeForward(p *plan) (time.Duration, error) {
	var runs [5]time.Duration
	s := &w.slots[0]
	err := withContext(w.dev, func() error {
		for i := range runs {
			err := w.gated(func() error {
				return errors.Join(s.evComp0.Record(w.comp), w.forward(p, inputRef{f32: s.in}, s.outDev), s.evComp1.Record(w.comp))
			})
			if err != nil {
				return err
			}
			if runs[i], err = s.evComp1.Since(s.evComp0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, w.wrap(fmt.Sprintf("timing the forward pass of batch %d", p.n), err)
	}
	slices.Sort(runs[:])
	return runs[len(runs)/2], nil
}

// Wait blocks until slot's logits are in Output(slot) and returns the stage
// times measured with events; Compute and LaunchGap are split by splitSpan.
func (w *worker) Wait(slot int) (backend.Times, error) {
	s := &w.slots[slot]
	if err := errors.Join(s.evOut1.Synchronize(), s.evEnq.Synchronize()); err != nil {
		return backend.Times{}, w.wrap("wait", err)
	}
	var t backend.Times
	var e1, e2, e3, e4 error
	var span, enqueued time.Duration
	t.H2D, e1 = s.evIn1.Since(s.evIn0)
	span, e2 = s.evComp1.Since(s.evComp0)
	enqueued, e3 = s.evEnq.Since(s.evComp0)
	t.D2H, e4 = s.evOut1.Since(s.evOut0)
	if err := errors.Join(e1, e2, e3, e4); err != nil {
		return backend.Times{}, w.wrap("event times", err)
	}
	t.Compute, t.LaunchGap, t.HasLaunchGap = splitSpan(span, enqueued, w.dev.ownTime[s.ran], s.graph)
	t.Valid = true
	w.e.sampler.record(w, s, t)
	return t, nil
}

// forward enqueues the whole network for p.n images from in (device input) to
// out (device logits) on the compute stream.
func (w *worker) forward(p *plan, src inputRef, out uintptr) error {
	net, h := w.e.net, w.dnn
	run := func(l *convLayer, x, y, z uintptr) error {
		c := &p.convs[l.index]
		if c.graph != nil {
			return w.runFused(p, l, x, y, z)
		}
		if !c.fused && (l.relu || z != 0) {
			return errors.New("unfused convolution with ReLU or residual")
		}
		return w.legacyConv(l, c, choice{algo: c.algo, fused: c.fused}, x, y, z, w.ws, w.wsSize)
	}
	conv := func(l *convLayer, x, y, z uintptr) error {
		if err := run(l, x, y, z); err != nil {
			return err
		}
		return w.markConv(p, l)
	}
	in, err := w.convertInput(p, src)
	if err == nil {
		err = w.markInput(src)
	}
	if err != nil {
		return fmt.Errorf("input conversion: %w", err)
	}
	if err := conv(net.convs[0], in, w.stem, 0); err != nil {
		return fmt.Errorf("stem: %w", err)
	}
	if err := h.Pool(net.maxPool, 1, p.stemOut, w.stem, 0, p.poolOut, w.act[0]); err != nil {
		return fmt.Errorf("max-pool: %w", err)
	}
	if err := w.markLayer("max-pool", "cudnnPoolingForward max 3x3/2"); err != nil {
		return err
	}
	cur := 0
	for i, b := range net.blocks {
		var free [3]int
		k := 0
		for j := range w.act {
			if j != cur {
				free[k] = j
				k++
			}
		}
		x, y1 := w.act[cur], w.act[free[0]]
		short, o := x, free[1]
		beside := false
		if b.down != nil {
			short, o = w.act[free[1]], free[2]
			var err error
			if beside, err = w.shortcutBeside(p, b, x, short); err != nil {
				return fmt.Errorf("block %d shortcut beside conv1: %w", i, err)
			}
			if !beside {
				if err := conv(b.down, x, short, 0); err != nil {
					return fmt.Errorf("block %d shortcut: %w", i, err)
				}
			}
		}
		if err := conv(b.conv1, x, y1, 0); err != nil {
			return fmt.Errorf("block %d conv1: %w", i, err)
		}
		if beside {
			if err := w.joinBeside(); err != nil {
				return fmt.Errorf("block %d shortcut join: %w", i, err)
			}
		}
		if err := conv(b.conv2, y1, w.act[o], short); err != nil {
			return fmt.Errorf("block %d conv2: %w", i, err)
		}
		cur = o
	}
	head := w.dev.head
	if err := head.pool(w.comp, net, w.act[cur], w.feat, p.n); err != nil {
		return fmt.Errorf("average pool: %w", err)
	}
	if err := w.markLayer("average pool", head.gapK); err != nil {
		return err
	}
	if err := head.classify(w.comp, net, w.dev, w.feat, out, p.n); err != nil {
		return fmt.Errorf("classifier: %w", err)
	}
	return w.markLayer("classifier", fcShapes[fcKernel(p.n, net.feat)].name)
}

// wrap adds context to a worker error and marks it with backend.ErrDeviceLost
// when the context cannot be used again.
func (w *worker) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if deviceLost(err) {
		return fmt.Errorf("cuda: worker %d (device %d): %s: %w: %w", w.id, w.dev.ordinal, op, err, backend.ErrDeviceLost)
	}
	return fmt.Errorf("cuda: worker %d (device %d): %s: %w", w.id, w.dev.ordinal, op, err)
}

//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/inferbench/inferbench/inference/internal/switches"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
	"github.com/inferbench/inferbench/inference/internal/gpu/nvml"
	"github.com/inferbench/inferbench/inference/resnet"
)

// findWorkspace is the most workspace (bytes) an algorithm may use; the search
// skips algorithms that need more.
const findWorkspace = 256 << 20

// engine is a model ready to run on one or more GPUs. It implements
// backend.Engine, backend.Allocator, backend.HostRegistrar and
// backend.DeviceRegistrar. Its methods are safe for concurrent use.
type engine struct {
	opts    backend.Options
	model   *resnet.Model  // read during Open only
	folded  *resnet.Folded // the model folded, made by init
	dnn     *cudnn.Lib
	net     *network
	plans   *planner
	devices []*device // one per distinct ordinal
	workers []*worker
	info    backend.Info
	sampler *sampler
	copier  *copier

	calibrateErr error // why calibrate could not time the forward pass
	inputKernel  bool  // float32 input is converted by our kernel (useInputKernel at Open)

	config    []backend.KV // Describe's lines, read during init
	configErr error
	clock     *stopwatch // Open's sub-steps

	hostMu     sync.RWMutex
	host       []hostRange // pinned memory handed out by AllocHost
	registered []hostRange // caller's memory page-locked by RegisterHost

	ipcMu     sync.Mutex
	ipc       []*ipcMapping // other processes' GPU memory mapped by OpenIPC
	ipcClosed bool          // Close closed them: OpenIPC refuses

	closeOnce sync.Once
	closeErr  error
}

type hostRange struct {
	p          unsafe.Pointer
	start, end uintptr
}

var _ backend.Allocator = (*engine)(nil)

// Open prepares m to run with opts on the GPUs in opts.Devices.
func (cudaBackend) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	opts, err := normalise(opts)
	if err != nil {
		return nil, err
	}
	if err := resnet.CheckInput(opts.Height, opts.Width); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if m.Arch.InChannels != 3 {
		return nil, fmt.Errorf("cuda: model has %d input channels, want 3", m.Arch.InChannels)
	}
	e := &engine{opts: opts, model: m, inputKernel: useInputKernel}
	if err := e.open(); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	return e, nil
}

// normalise checks o and fills what Open may default: device 0, and Batches
// sorted, without duplicates or sizes out of range, with MaxBatch added.
func normalise(o backend.Options) (backend.Options, error) {
	if o.Workers < 1 || o.Slots < 1 || o.MaxBatch < 1 {
		return o, fmt.Errorf("cuda: Workers, Slots and MaxBatch must be at least 1 (got %d, %d, %d)", o.Workers, o.Slots, o.MaxBatch)
	}
	if len(o.Devices) == 0 {
		o.Devices = []int{0}
	}
	o.Devices = slices.Clone(o.Devices)
	if o.Normalization.IsZero() {
		o.Normalization = backend.ImageNet
	}
	var batches []int
	for _, n := range append(slices.Clone(o.Batches), o.MaxBatch) {
		if n >= 1 && n <= o.MaxBatch && !slices.Contains(batches, n) {
			batches = append(batches, n)
		}
	}
	slices.Sort(batches)
	o.Batches = batches
	return o, nil
}

// open runs the steps the package comment lists, timing each as a part of
// Info().Setup followed by its sub-steps.
func (e *engine) open() error {
	e.clock = newStopwatch(time.Now)
	steps := []struct {
		name string
		run  func() error
		skip bool
	}{
		{name: "init", run: e.initialise},
		{name: "plan", run: e.plan},
		{name: "capture", run: e.capture, skip: !e.opts.Graphs},
		{name: backend.PartFirst, run: e.prime},
		{name: "calibrate", run: e.calibrate, skip: e.opts.Graphs},
	}
	var setup []backend.Part
	for _, s := range steps {
		if s.skip {
			continue
		}
		t0 := time.Now()
		if err := s.run(); err != nil {
			return err
		}
		setup = append(setup, backend.Part{Name: s.name, Time: time.Since(t0)})
	}
	cfg := e.config
	if e.configErr != nil {
		cfg = []backend.KV{{Key: "gpu", Value: "unknown: " + e.configErr.Error()}}
	}
	cfg = append(cfg, backend.KV{Key: "cuda-devices", Value: fmt.Sprint(e.opts.Devices)})
	cfg = append(cfg, e.plans.cache.config()...)
	cfg = append(cfg, backend.KV{Key: "cudnn-search", Value: e.plans.search.String()})
	cfg = append(cfg, backend.KV{Key: "cuda-convs", Value: e.plans.convsConfig()})
	cfg = append(cfg, backend.KV{Key: "cuda-stem", Value: e.stemConfig()})
	if e.calibrateErr != nil {
		cfg = append(cfg, backend.KV{Key: "cuda-calibration", Value: "failed: " + e.calibrateErr.Error()})
	}
	cfg = append(cfg, e.sampler.config())
	if path := switches.CUDATimeline.Value(); path != "" {
		v := path
		if err := writeTimeline(path, e.clock); err != nil {
			v = "failed: " + err.Error()
		}
		cfg = append(cfg, backend.KV{Key: "cuda-timeline", Value: v})
	}
	e.info = backend.Info{Config: cfg, Setup: e.clock.parts(setup), GPU: true}
	return nil
}

// stemConfig is the config line cuda-stem: the stem's form and convolution,
// for example "s2d: 16x128x128 4x4/1 (the space-to-depth form of 3x250x250
// 7x7/2)" or "plain: 3x250x250 7x7/2".
func (e *engine) stemConfig() string {
	s, f := e.net.convs[0], &e.folded.Stem
	v := fmt.Sprintf("%s: %dx%dx%d %dx%d/%d", e.net.stem, s.in, s.inH, s.inW, s.k, s.k, s.stride)
	if e.net.stem == stemS2D {
		v += fmt.Sprintf(" (the space-to-depth form of %dx%dx%d %dx%d/%d)", f.In, e.opts.Height, e.opts.Width, f.K, f.K, f.Stride)
	}
	return v
}

// initialise loads the libraries and packs the network while the driver
// starts and retains each device's context (or takes over those a Start
// made); then, all at once, uploads the weights and loads the input kernels
// on every device, makes the workers and opens NVML.
func (e *engine) initialise() error {
	ordinals := distinct(e.opts.Devices)
	err := concurrently(
		func() error {
			n, err := countDevices(e.clock, "init.driver")
			if err != nil {
				return err
			}
			for _, ord := range ordinals {
				if ord < 0 || ord >= n {
					return fmt.Errorf("cuda: device %d does not exist (%d devices)", ord, n)
				}
			}
			return e.clock.time("init.context", func() (err error) {
				early, clock := takeStarted() // what a Start made, now ours
				if clock != nil {
					e.clock.merge(clock)
				}
				defer func() { err = errors.Join(err, closeDevices(early)) }()
				for _, ord := range ordinals {
					d := early[ord]
					delete(early, ord)
					if d == nil {
						d, err = newDevice(ord)
					}
					if d != nil {
						e.devices = append(e.devices, d)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
		},
		func() error {
			err := e.clock.time("init.libraries", func() (err error) {
				e.dnn, err = loadDNN()
				return err
			})
			if err != nil {
				return err
			}
			_ = e.clock.time("init.fold", func() error {
				e.folded = e.model.Fold()
				return nil
			})
			return e.clock.time("init.network", func() error {
				stem := chooseStem(askStem(e.opts.Precision), e.opts.Precision, e.inputKernel)
				var err error
				e.net, err = newNetwork(e.dnn, e.folded, e.opts, stem)
				return err
			})
		},
	)
	if err != nil {
		return err
	}
	e.plans = newPlanner(e.dnn, e.net, e.opts)
	byOrdinal := map[int]*device{}
	var jobs []func() error
	for _, d := range e.devices {
		byOrdinal[d.ordinal] = d
		jobs = append(jobs, func() error { return d.load(e.net, e.opts, e.clock) })
	}
	workers := make([]*worker, e.opts.Workers)
	for i := range workers {
		d := byOrdinal[e.opts.Devices[i%len(e.opts.Devices)]]
		jobs = append(jobs, func() (err error) {
			workers[i], err = newWorker(e, i, d)
			return err
		})
	}
	jobs = append(jobs, func() error {
		return e.clock.time("init.nvml", func() error {
			// The sampler initialises NVML first, so that Describe's NVML
			// query finds it initialised.
			e.sampler = newSampler(e)
			e.config, e.configErr = Describe()
			return nil
		})
	})
	e.copier = newCopier(min(8, runtime.NumCPU()))
	err = concurrently(jobs...)
	for _, w := range workers {
		if w != nil {
			e.workers = append(e.workers, w)
		}
	}
	return err
}

// plan makes the plans of the prepared batch sizes (choosing algorithms on
// worker 0) and gives every worker, at once, the workspace they need and
// their backend-API plans.
func (e *engine) plan() error {
	ws, err := e.plans.prepare(e.workers[0], e.clock)
	if err != nil {
		return err
	}
	var jobs []func() error
	for _, w := range e.workers {
		jobs = append(jobs, func() error {
			return e.clock.time("plan.workers", func() error {
				if err := w.allocWorkspace(ws); err != nil {
					return err
				}
				return w.prepareFused()
			})
		})
	}
	return concurrently(jobs...)
}

// capture records every worker's graphs (Options.Graphs), the workers at
// once: each records on its own stream, in a capture local to its thread.
func (e *engine) capture() error {
	var jobs []func() error
	for _, w := range e.workers {
		jobs = append(jobs, w.capture)
	}
	return concurrently(jobs...)
}

// prime runs every worker's first forward passes, the workers at once.
func (e *engine) prime() error {
	var jobs []func() error
	for _, w := range e.workers {
		jobs = append(jobs, w.prime)
	}
	return concurrently(jobs...)
}

// calibrate measures, on the first worker of every device, the forward pass's
// own time for each prepared batch size (worker.timeForward), from which Wait
// tells execution from launch gaps. With graphs every prepared size runs as a
// graph, whose gaps need no calibration, and the step is skipped.
//
// A failure does not fail Open (prime already ran the same
// calls): the sizes stay uncalibrated, so their batches report no launch gap,
// and the error is the config line cuda-calibration.
func (e *engine) calibrate() error {
	for _, d := range e.devices {
		i := slices.IndexFunc(e.workers, func(w *worker) bool { return w.dev == d })
		for _, n := range e.opts.Batches {
			own, err := e.workers[i].timeForward(e.plans.prepared(n))
			if err != nil {
				if deviceLost(err) {
					return err
				}
				e.calibrateErr = err
				clear(d.ownTime)
				return nil
			}
			d.ownTime[n] = own
		}
	}
	return nil
}

// Info describes the devices, the algorithm cache's use and the warm-up parts.
func (e *engine) Info() backend.Info { return e.info }

// Workers returns the compute lanes.
func (e *engine) Workers() []backend.Worker {
	out := make([]backend.Worker, len(e.workers))
	for i, w := range e.workers {
		out[i] = w
	}
	return out
}

// Sampler returns the utilisation sampler: NVML's utilisation.gpu averaged over
// the engine's devices, and the busy fraction from compute events.
func (e *engine) Sampler() backend.Sampler { return e.sampler }

// Close waits for the devices to finish and releases everything. It is idempotent.
func (e *engine) Close() error {
	e.closeOnce.Do(func() {
		var errs []error
		if e.sampler != nil {
			errs = append(errs, e.sampler.close())
		}
		for _, w := range e.workers {
			errs = append(errs, w.close())
		}
		if e.plans != nil {
			e.plans.destroy()
		}
		if e.net != nil {
			e.net.destroy()
		}
		e.hostMu.Lock()
		if len(e.host) > 0 && len(e.devices) > 0 {
			errs = append(errs, withContext(e.devices[0], func() error {
				var errs []error
				for _, r := range e.host {
					errs = append(errs, cudadrv.HostFree(r.p))
				}
				return errors.Join(errs...)
			}))
		}
		e.host = nil
		e.hostMu.Unlock()
		errs = append(errs, e.unregisterAllHost(), e.closeAllIPC())
		for _, d := range e.devices {
			errs = append(errs, d.close())
		}
		if e.copier != nil {
			e.copier.close()
		}
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}

// AllocHost returns n float32 values of pinned host memory, which CopyIn copies
// from without staging. Release it with FreeHost before Close (Close frees what
// is left).
func (e *engine) AllocHost(n int) ([]float32, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: AllocHost(%d)", n)
	}
	var p unsafe.Pointer
	err := withContext(e.devices[0], func() error {
		var err error
		p, err = cudadrv.HostAlloc(4 * n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	e.hostMu.Lock()
	e.host = append(e.host, hostRange{p, uintptr(p), uintptr(p) + uintptr(4*n)})
	e.hostMu.Unlock()
	return unsafe.Slice((*float32)(p), n), nil
}

// FreeHost releases memory from AllocHost.
func (e *engine) FreeHost(p []float32) error {
	if len(p) == 0 {
		return errors.New("cuda: FreeHost of an empty slice")
	}
	base := unsafe.Pointer(&p[0])
	e.hostMu.Lock()
	i := slices.IndexFunc(e.host, func(r hostRange) bool { return r.p == base })
	if i < 0 {
		e.hostMu.Unlock()
		return errors.New("cuda: FreeHost of memory not from AllocHost")
	}
	e.host = slices.Delete(e.host, i, i+1)
	e.hostMu.Unlock()
	return withContext(e.devices[0], func() error { return cudadrv.HostFree(base) })
}

var _ backend.HostRegistrar = (*engine)(nil)

// RegisterHost page-locks p, memory the caller mapped (a client's
// shared-memory region), once, with cuMemHostRegister (portable, so every
// device's context may copy from it). Until unregister is called, CopyIn
// treats parts inside p as it treats AllocHost memory: one asynchronous DMA
// from the caller's memory, no staging copy. unregister is idempotent, and
// does nothing after Close (which unregisters what is left).
func (e *engine) RegisterHost(p []byte) (unregister func() error, err error) {
	if len(p) == 0 {
		return nil, errors.New("cuda: RegisterHost of no memory")
	}
	base := unsafe.Pointer(unsafe.SliceData(p))
	if err := withContext(e.devices[0], func() error { return cudadrv.HostRegister(base, len(p)) }); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	e.hostMu.Lock()
	e.registered = append(e.registered, hostRange{base, uintptr(base), uintptr(base) + uintptr(len(p))})
	e.hostMu.Unlock()
	var once sync.Once
	var uerr error
	return func() error {
		once.Do(func() {
			e.hostMu.Lock()
			i := slices.IndexFunc(e.registered, func(r hostRange) bool { return r.p == base })
			if i < 0 { // Close unregistered it
				e.hostMu.Unlock()
				return
			}
			e.registered = slices.Delete(e.registered, i, i+1)
			e.hostMu.Unlock()
			uerr = withContext(e.devices[0], func() error { return cudadrv.HostUnregister(base) })
			if uerr != nil {
				uerr = fmt.Errorf("cuda: %w", uerr)
			}
		})
		return uerr
	}, nil
}

// registeredHost reports whether [start, end) lies inside memory from
// RegisterHost; the caller holds hostMu.
func (e *engine) registeredHost(start, end uintptr) bool {
	for _, r := range e.registered {
		if start >= r.start && end <= r.end {
			return true
		}
	}
	return false
}

// unregisterAllHost undoes every RegisterHost still in force (for Close,
// while device 0's context is still retained).
func (e *engine) unregisterAllHost() error {
	e.hostMu.Lock()
	left := e.registered
	e.registered = nil
	e.hostMu.Unlock()
	if len(left) == 0 || len(e.devices) == 0 {
		return nil
	}
	return withContext(e.devices[0], func() error {
		var errs []error
		for _, r := range left {
			errs = append(errs, cudadrv.HostUnregister(r.p))
		}
		return errors.Join(errs...)
	})
}

// pinned reports whether p lies inside memory from AllocHost or RegisterHost.
func (e *engine) pinned(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(&p[0]))
	end := start + uintptr(len(p))
	e.hostMu.RLock()
	defer e.hostMu.RUnlock()
	for _, r := range e.host {
		if start >= r.start && end <= r.end {
			return true
		}
	}
	return e.registeredHost(start, end)
}

// Describe initialises the driver if no engine did, and returns config lines
// for device 0 without opening an engine: gpu, driver, cuda (the driver's CUDA
// version) and cudnn. Without a usable GPU its error wraps
// backend.ErrNoGPU.
func Describe() ([]backend.KV, error) {
	if _, err := deviceCount(); err != nil {
		return nil, err
	}
	d, err := cudadrv.GetDevice(0)
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	name, err := d.Name()
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	v, err := cudadrv.DriverVersion()
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	kv := []backend.KV{{Key: "gpu", Value: name}}
	if drv, err := nvml.DriverVersion(); err == nil {
		kv = append(kv, backend.KV{Key: "driver", Value: drv})
	}
	kv = append(kv, backend.KV{Key: "cuda", Value: fmt.Sprintf("%d.%d", v/1000, v%1000/10)})
	if l, err := cudnn.Load(); err == nil {
		kv = append(kv, backend.KV{Key: "cudnn", Value: l.VersionString()})
	} else {
		return kv, err
	}
	return kv, nil
}

// deviceLost reports whether err leaves a CUDA context unusable.
func deviceLost(err error) bool {
	var r cudadrv.Result
	if errors.As(err, &r) && cudadrv.Sticky(int(r)) {
		return true
	}
	return errors.Is(err, cudnn.StatusExecutionFailed)
}

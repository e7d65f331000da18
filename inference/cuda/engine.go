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

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/cublas"
	"github.com/inferbench/inferbench/inference/internal/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/cudnn"
	"github.com/inferbench/inferbench/inference/internal/nvml"
	"github.com/inferbench/inferbench/inference/resnet"
)

// Default input size when Options leaves Height or Width at 0.
const defaultSize = 250

// findWorkspace is the most workspace (bytes) an algorithm may use; the search
// skips algorithms that need more.
const findWorkspace = 256 << 20

// engine is a model ready to run on one or more GPUs. It implements
// backend.Engine, backend.Allocator and backend.HostRegistrar. Its methods
// are safe for concurrent use.
type engine struct {
	opts    backend.Options
	folded  *resnet.Folded
	dnn     *cudnn.Lib
	blas    *cublas.Lib
	net     *network
	devices []*device // one per distinct ordinal
	workers []*worker
	info    backend.Info
	sampler *sampler
	copier  *copier

	// Algorithm cache use during Open, and why the cache could not be read or
	// written (nil if it could).
	cacheHits, cacheMisses int
	cacheErr               error

	planMu sync.Mutex
	plans  []*plan // index: batch size; read under planMu or after Open for prepared sizes
	// runAs maps a batch size n to the size the forward pass runs at: the
	// smallest prepared size in [n, 2n] (its plan and graph exist, and the
	// extra images are stale memory whose logits nobody reads: images never
	// mix), or n itself. Fixed at Open.
	runAs []int

	hostMu     sync.RWMutex
	host       []hostRange // pinned memory handed out by AllocHost
	registered []hostRange // caller's memory page-locked by RegisterHost

	closeOnce sync.Once
	closeErr  error
}

// device is one GPU and its copy of the weights.
type device struct {
	ordinal  int
	dev      cudadrv.Device
	ctx      cudadrv.Context
	params   uintptr        // all weights and biases, see network
	ref      cudadrv.Stream // idle stream for the busy-time reference events
	retained bool
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
	e := &engine{opts: opts, folded: m.Fold(), plans: make([]*plan, opts.MaxBatch+1)}
	if err := e.open(); err != nil {
		_ = e.Close()
		return nil, err
	}
	return e, nil
}

func normalise(o backend.Options) (backend.Options, error) {
	if o.Workers < 1 || o.Slots < 1 || o.MaxBatch < 1 {
		return o, fmt.Errorf("cuda: Workers, Slots and MaxBatch must be at least 1 (got %d, %d, %d)", o.Workers, o.Slots, o.MaxBatch)
	}
	if o.Height == 0 {
		o.Height = defaultSize
	}
	if o.Width == 0 {
		o.Width = defaultSize
	}
	if len(o.Devices) == 0 {
		o.Devices = []int{0}
	}
	o.Devices = slices.Clone(o.Devices)
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

func (e *engine) open() error {
	t0 := time.Now()
	n, err := deviceCount()
	if err != nil {
		return err
	}
	if e.dnn, err = cudnn.Load(); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if e.blas, err = cublas.Load(); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if e.net, err = newNetwork(e.dnn, e.folded, e.opts); err != nil {
		return err
	}
	byOrdinal := map[int]*device{}
	for _, ord := range e.opts.Devices {
		if ord < 0 || ord >= n {
			return fmt.Errorf("cuda: device %d does not exist (%d devices)", ord, n)
		}
		if byOrdinal[ord] != nil {
			continue
		}
		d, err := e.openDevice(ord)
		if d != nil {
			e.devices = append(e.devices, d)
			byOrdinal[ord] = d
		}
		if err != nil {
			return err
		}
	}
	e.copier = newCopier(min(8, runtime.NumCPU()))
	for i := 0; i < e.opts.Workers; i++ {
		d := byOrdinal[e.opts.Devices[i%len(e.opts.Devices)]]
		w, err := newWorker(e, i, d)
		if w != nil {
			e.workers = append(e.workers, w)
		}
		if err != nil {
			return err
		}
	}
	tLoad := time.Since(t0)

	t0 = time.Now()
	wsSize, err := e.prepare()
	if err != nil {
		return err
	}
	e.runAs = padSizes(e.opts.MaxBatch, func(m int) bool { return e.plans[m] != nil })
	for _, w := range e.workers {
		if err := w.allocWorkspace(wsSize); err != nil {
			return err
		}
	}
	tPlan := time.Since(t0)

	t0 = time.Now()
	for _, w := range e.workers {
		if err := w.warm(); err != nil {
			return err
		}
	}
	tFirst := time.Since(t0)
	setup := []backend.Part{{Name: "init", Time: tLoad}, {Name: "plan", Time: tPlan}, {Name: "prime", Time: tFirst}}
	if e.opts.Graphs {
		t0 = time.Now()
		for _, w := range e.workers {
			if err := w.capture(); err != nil {
				return err
			}
		}
		setup = append(setup, backend.Part{Name: "capture", Time: time.Since(t0)})
	}

	cfg, err := Describe()
	if err != nil {
		cfg = []backend.KV{{Key: "gpu", Value: "unknown: " + err.Error()}}
	}
	e.info = backend.Info{
		Config: append(cfg, backend.KV{Key: "cuda-devices", Value: fmt.Sprint(e.opts.Devices)}),
		Setup:  setup,
		GPU:    true,
	}
	e.sampler = newSampler(e)
	return nil
}

// deviceCount initialises the driver, on first use, and returns the number of
// devices; an error wraps backend.ErrNoGPU and says what failed.
func deviceCount() (int, error) {
	if err := cudadrv.Init(); err != nil {
		return 0, fmt.Errorf("cuda: %w: %w", backend.ErrNoGPU, err)
	}
	n, err := cudadrv.DeviceCount()
	if err != nil {
		return 0, fmt.Errorf("cuda: %w: %w", backend.ErrNoGPU, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("cuda: %w: the driver reports no device", backend.ErrNoGPU)
	}
	return n, nil
}

// withContext runs f on a locked OS thread with d's context current and
// restores the thread's previous context.
func withContext(d *device, f func() error) (err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := cudadrv.CurrentContext()
	if err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if err := cudadrv.SetCurrentContext(d.ctx); err != nil {
		return fmt.Errorf("cuda: device %d: %w", d.ordinal, err)
	}
	defer func() {
		if rerr := cudadrv.SetCurrentContext(prev); rerr != nil {
			err = errors.Join(err, fmt.Errorf("cuda: restoring the thread's context: %w", rerr))
		}
	}()
	return f()
}

func (e *engine) openDevice(ord int) (*device, error) {
	dev, err := cudadrv.GetDevice(ord)
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	ctx, err := dev.RetainPrimaryContext()
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ord, err)
	}
	d := &device{ordinal: ord, dev: dev, ctx: ctx, retained: true}
	err = withContext(d, func() error {
		var err error
		if d.ref, err = cudadrv.NewStream(); err != nil {
			return fmt.Errorf("cuda: device %d: %w", ord, err)
		}
		params := e.net.params
		if d.params, err = cudadrv.MemAlloc(len(params)); err != nil {
			return fmt.Errorf("cuda: device %d: weights: %w", ord, err)
		}
		if err := cudadrv.MemcpyHtoD(d.params, unsafe.Pointer(&params[0]), len(params)); err != nil {
			return fmt.Errorf("cuda: device %d: upload weights: %w", ord, err)
		}
		return nil
	})
	return d, err
}

func (d *device) close() error {
	var errs []error
	if d.params != 0 || !d.ref.IsZero() {
		errs = append(errs, withContext(d, func() error {
			var errs []error
			if d.params != 0 {
				errs = append(errs, cudadrv.MemFree(d.params))
				d.params = 0
			}
			if !d.ref.IsZero() {
				errs = append(errs, d.ref.Destroy())
				d.ref = cudadrv.Stream{}
			}
			return errors.Join(errs...)
		}))
	}
	if d.retained {
		errs = append(errs, d.dev.ReleasePrimaryContext())
		d.retained = false
	}
	return errors.Join(errs...)
}

// Info describes the devices and the warm-up parts (load, plan, first-inference).
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
		if len(e.devices) > 0 {
			errs = append(errs, withContext(e.devices[0], func() error {
				for _, p := range e.plans {
					if p != nil {
						p.destroy()
					}
				}
				return nil
			}))
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
		errs = append(errs, e.unregisterAllHost())
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

// pinned reports whether p lies inside memory from AllocHost or RegisterHost.
func (e *engine) pinned(p []float32) bool {
	if len(p) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(&p[0]))
	end := start + uintptr(4*len(p))
	e.hostMu.RLock()
	defer e.hostMu.RUnlock()
	for _, r := range e.host {
		if start >= r.start && end <= r.end {
			return true
		}
	}
	return e.registeredHost(start, end)
}

// Describe returns config lines for device 0 without opening an engine: gpu,
// driver, cuda (driver API version), cudnn and cublas.
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
	if l, err := cublas.Load(); err == nil {
		if s, err := l.Version(); err == nil {
			kv = append(kv, backend.KV{Key: "cublas", Value: s})
		}
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
	return errors.Is(err, cudnn.StatusExecutionFailed) || errors.Is(err, cublas.StatusExecutionFailed)
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

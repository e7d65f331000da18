//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
)

// device is one GPU: its primary context and its copy of the weights.
type device struct {
	ordinal  int
	dev      cudadrv.Device
	ctx      cudadrv.Context
	params   uintptr        // all weights and biases, see network
	ref      cudadrv.Stream // an idle stream: events recorded on it complete at once
	retained bool
	// ownTime is the forward pass's own execution time by batch size, measured
	// at Open by worker.timeForward for the prepared sizes when the pass runs
	// as library calls (no graphs). Written only during Open.
	ownTime map[int]time.Duration
	// kernels are the input conversion kernels, loaded in the device's
	// context by load (see loadInputKernels).
	kernels *inputKernels
	// head is the classifier head's kernels (see headKernels), loaded with
	// the input kernels.
	head *headKernels
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

// newDevice retains device ord's primary context and makes its idle stream.
// On error it returns what it made, for close.
func newDevice(ord int) (*device, error) {
	dev, err := cudadrv.GetDevice(ord)
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	ctx, err := dev.RetainPrimaryContext()
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", ord, err)
	}
	d := &device{ordinal: ord, dev: dev, ctx: ctx, retained: true, ownTime: map[int]time.Duration{}}
	err = withContext(d, func() error {
		var err error
		if d.ref, err = cudadrv.NewStream(); err != nil {
			return fmt.Errorf("cuda: device %d: %w", ord, err)
		}
		return nil
	})
	return d, err
}

// load uploads net's parameters to the device and loads its input conversion
// kernels for o and its classifier head's kernels, timing both as sub-steps
// of init.
func (d *device) load(net *network, o backend.Options, clock *stopwatch) error {
	return withContext(d, func() error {
		err := clock.time("init.weights", func() error {
			var err error
			if d.params, err = cudadrv.MemAlloc(len(net.params)); err != nil {
				return fmt.Errorf("cuda: device %d: weights: %w", d.ordinal, err)
			}
			if err := cudadrv.MemcpyHtoD(d.params, unsafe.Pointer(&net.params[0]), len(net.params)); err != nil {
				return fmt.Errorf("cuda: device %d: upload weights: %w", d.ordinal, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return clock.time("init.kernels", func() (err error) {
			if d.kernels, err = loadInputKernels(net, o.Normalization, o.Height, o.Width); err != nil {
				return err
			}
			if d.head, err = loadHeadKernels(net); err != nil {
				return err
			}
			// The weights and the table went up with cuMemcpyHtoD from
			// pageable memory, which may return before the device has them;
			// the workers' streams do not wait for the default stream.
			return cudadrv.Synchronize()
		})
	})
}

// param is the device address of the parameter at byte offset off.
func (d *device) param(off int) uintptr { return d.params + uintptr(off) }

// pciLocation is where the device sits on the PCI bus: domain, bus, device.
func (d *device) pciLocation() ([3]int, error) {
	var v [3]int
	for k, a := range []cudadrv.Attribute{cudadrv.PCIDomainID, cudadrv.PCIBusID, cudadrv.PCIDeviceID} {
		var err error
		if v[k], err = d.dev.Attribute(a); err != nil {
			return v, fmt.Errorf("cuda: device %d: PCI location: %w", d.ordinal, err)
		}
	}
	return v, nil
}

func (d *device) close() error {
	var errs []error
	if d.params != 0 || !d.ref.IsZero() || d.kernels != nil || d.head != nil {
		errs = append(errs, withContext(d, func() error {
			errs := []error{d.kernels.unload(), d.head.unload()}
			d.kernels, d.head = nil, nil
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

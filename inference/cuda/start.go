//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
)

var _ backend.Starter = cudaBackend{}

// early is the set-up Start began: the driver and the libraries (loaded once
// per process, so an Open that follows finds them) and a device, with its
// primary context retained, for each ordinal, which Open takes over.
type early struct {
	done  chan struct{} // closed when the work is over
	clock *stopwatch    // its runs: start.libraries, start.driver, start.context

	mu      sync.Mutex
	devices map[int]*device // made and not yet taken over
}

// started is the early set-up no Open has taken over yet, or nil.
var started struct {
	mu sync.Mutex
	e  *early
}

// Start begins, on a goroutine, what Open would do first and needs no model:
// it initialises the driver, loads cuDNN and retains the primary
// context of every device in opts.Devices (device 0 when empty). The next
// Open takes over those contexts. While an earlier Start's work is waiting
// for its Open, Start does nothing (its stop too).
func (cudaBackend) Start(opts backend.Options) (stop func()) {
	ordinals := distinct(opts.Devices)
	started.mu.Lock()
	defer started.mu.Unlock()
	if started.e != nil {
		return func() {}
	}
	e := &early{done: make(chan struct{}), clock: newStopwatch(time.Now), devices: map[int]*device{}}
	started.e = e
	go e.run(ordinals)
	return func() {
		<-e.done
		started.mu.Lock()
		if started.e == e {
			started.e = nil
		}
		started.mu.Unlock()
		e.mu.Lock()
		defer e.mu.Unlock()
		_ = closeDevices(e.devices) // nobody took them: nobody is told
		clear(e.devices)
	}
}

// run does the early set-up; errors are left for Open to meet again.
func (e *early) run(ordinals []int) {
	defer close(e.done)
	_ = concurrently(
		func() error {
			return e.clock.time("start.libraries", func() error {
				_, err := loadDNN()
				return err
			})
		},
		func() error {
			n, err := countDevices(e.clock, "start.driver")
			if err != nil {
				return err
			}
			for _, ord := range ordinals {
				if ord < 0 || ord >= n {
					continue
				}
				var d *device
				err := e.clock.timeWhat("start.context", fmt.Sprint("device ", ord), func() (err error) {
					d, err = newDevice(ord)
					return err
				})
				if err != nil {
					if d != nil {
						_ = d.close()
					}
					return err
				}
				e.mu.Lock()
				e.devices[ord] = d
				e.mu.Unlock()
			}
			return nil
		},
	)
}

// countDevices initialises the driver (deviceCount), timed as sub-step name
// of clock.
func countDevices(clock *stopwatch, name string) (n int, err error) {
	err = clock.time(name, func() (err error) {
		n, err = deviceCount()
		return err
	})
	return n, err
}

// loadDNN loads cuDNN (once per process) with the parts it would load on its
// first convolution.
func loadDNN() (*cudnn.Lib, error) {
	dnn, err := cudnn.Load()
	if err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	dnn.Preload()
	return dnn, nil
}

// takeStarted waits for the early set-up of a Start, if one is waiting for
// its Open, and returns the devices it made, which the caller then owns, and
// the stopwatch that timed it (nil without a Start).
func takeStarted() (map[int]*device, *stopwatch) {
	started.mu.Lock()
	e := started.e
	started.e = nil
	started.mu.Unlock()
	if e == nil {
		return nil, nil
	}
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.devices
	e.devices = map[int]*device{}
	return out, e.clock
}

// distinct returns the ordinals in devices, sorted, each once; device 0 when
// there are none.
func distinct(devices []int) []int {
	if len(devices) == 0 {
		return []int{0}
	}
	out := slices.Clone(devices)
	slices.Sort(out)
	return slices.Compact(out)
}

// closeDevices closes the devices of m, joining their errors.
func closeDevices(m map[int]*device) error {
	var errs []error
	for _, d := range m {
		errs = append(errs, d.close())
	}
	return errors.Join(errs...)
}

//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/gpu/nvml"
)

// sampler measures utilisation two ways: NVML's utilisation.gpu sampled every
// 100 ms (not measured, with the reason in Utilization.PercentErr, when NVML
// is unavailable or no sample fell inside the interval), and the busy fraction from events: the share of the interval in
// which each device executed this engine's forward passes. Each batch waited
// for during the interval contributes the interval [end-Compute, end], where
// end is its compute end event, timed against a reference event recorded on
// the device at Start, and Compute is its execution time without launch gaps
// (backend.Times). For one worker per device, whose batches follow each other
// on one stream, the sum is exact: a batch's kernels run within its span and
// take Compute in all; placing them at the span's end only decides how the
// batches of several workers on one device overlap, which the union counts
// once. The fraction is not measured when a batch had no launch-gap split
// (or its end could not be timed).
type sampler struct {
	e       *engine
	nvml    *nvml.Sampler // nil when NVML is not available
	nvmlErr error         // why nvml is nil

	mu     sync.Mutex
	active bool
	refs   []refEvents    // per engine device
	spans  [][][2]float64 // per device: execution intervals in ms after the reference
	// unmeasured counts the interval's batches whose execution interval is
	// unknown: no launch-gap split, or an event time the driver refused.
	unmeasured int
}

type refEvents struct{ start, end cudadrv.Event }

func newSampler(e *engine) *sampler {
	s := &sampler{e: e, refs: make([]refEvents, len(e.devices)), spans: make([][][2]float64, len(e.devices))}
	s.nvml, s.nvmlErr = openNVML(e.devices)
	for i := range s.spans {
		s.spans[i] = make([][2]float64, 0, 1<<14)
	}
	return s
}

// openNVML opens an NVML sampler for devs, in their order, found by PCI location.
func openNVML(devs []*device) (*nvml.Sampler, error) {
	gpus := make([]nvml.PCI, len(devs))
	for i, d := range devs {
		v, err := d.pciLocation()
		if err != nil {
			return nil, err
		}
		gpus[i] = nvml.PCI{Domain: uint32(v[0]), Bus: uint32(v[1]), Device: uint32(v[2])}
	}
	return nvml.Open(gpus, 0)
}

func (s *sampler) deviceIndex(d *device) int { return slices.Index(s.e.devices, d) }

// config is the config line that says whether NVML samples utilisation.
func (s *sampler) config() backend.KV {
	if s.nvml == nil {
		return backend.KV{Key: "nvml", Value: "unavailable: " + s.nvmlErr.Error()}
	}
	return backend.KV{Key: "nvml", Value: fmt.Sprintf("utilization.gpu every %v", s.nvml.Period())}
}

// Start begins an interval.
func (s *sampler) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active {
		return errors.New("cuda: sampler started twice")
	}
	for i, d := range s.e.devices {
		err := withContext(d, func() error {
			r := &s.refs[i]
			if r.start.IsZero() {
				var err error
				if r.start, err = cudadrv.NewEvent(); err != nil {
					return err
				}
				if r.end, err = cudadrv.NewEvent(); err != nil {
					return err
				}
			}
			if err := r.start.Record(d.ref); err != nil {
				return err
			}
			return r.start.Synchronize()
		})
		if err != nil {
			return err
		}
		s.spans[i] = s.spans[i][:0]
		s.unmeasured = 0
	}
	if s.nvml != nil {
		if err := s.nvml.Start(); err != nil {
			return err
		}
	}
	s.active = true
	return nil
}

// record adds the execution interval of a finished batch of w, whose times
// Wait measured as t.
func (s *sampler) record(w *worker, sl *slot, t backend.Times) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.active {
		return
	}
	i := s.deviceIndex(w.dev)
	end, err := sl.evComp1.Since(s.refs[i].start)
	if err != nil || !t.HasLaunchGap {
		s.unmeasured++
		return
	}
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
	s.spans[i] = append(s.spans[i], [2]float64{ms(end - t.Compute), ms(end)})
}

// Stop ends the interval.
func (s *sampler) Stop() (backend.Utilization, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.active {
		return backend.Utilization{}, errors.New("cuda: sampler stopped without Start")
	}
	s.active = false
	u := backend.Utilization{HasBusy: s.unmeasured == 0}
	var errs []error
	var busy float64
	for i, d := range s.e.devices {
		var total float64
		errs = append(errs, withContext(d, func() error {
			r := &s.refs[i]
			if err := r.end.Record(d.ref); err != nil {
				return err
			}
			if err := r.end.Synchronize(); err != nil {
				return err
			}
			d, err := r.end.Since(r.start)
			total = d.Seconds() * 1e3
			return err
		}))
		if total > 0 {
			busy += union(s.spans[i], total) / total
		}
	}
	u.Busy = 100 * busy / float64(len(s.e.devices))
	if s.nvml != nil {
		mean, n, err := s.nvml.Stop()
		nvmlPercent(&u, nil, mean, n, s.nvml.Period())
		errs = append(errs, err)
	} else {
		nvmlPercent(&u, s.nvmlErr, 0, 0, nvml.DefaultPeriod)
	}
	return u, errors.Join(errs...)
}

func (s *sampler) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.nvml != nil {
		errs = append(errs, s.nvml.Close())
	}
	for i, d := range s.e.devices {
		r := &s.refs[i]
		if !r.start.IsZero() {
			errs = append(errs, withContext(d, func() error {
				return errors.Join(r.start.Destroy(), r.end.Destroy())
			}))
		}
	}
	return errors.Join(errs...)
}

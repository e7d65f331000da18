//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/cublas"
	"github.com/inferbench/inferbench/inference/internal/cudadrv"
)

// startBLASFirstUse begins, on a goroutine per device, the classifier's
// product at every prepared batch size, with a cuBLAS handle, stream and
// buffers of its own (background.blas-first-use in the timeline, TimelineEnv;
// no step's part, as it runs beside the steps). A
// process's first cuBLAS product costs about 120 ms of one-time set-up in
// cuBLAS and the driver on an H200 (the first launch of each of its kernels
// loads it), which a worker's first graph recording otherwise waits for: begun
// as soon as the contexts exist, it runs while the workers are made and the
// plan is made. Init does not wait for it; capture (or, without graphs, prime)
// does, as sub-step capture.blas-wait (prime.blas-wait). Its errors are
// dropped: the workers make the same calls and report theirs.
func (e *engine) startBLASFirstUse() {
	for _, d := range e.devices {
		e.firstUse.Go(func() {
			_ = e.clock.timeWhat("background.blas-first-use", fmt.Sprint("device ", d.ordinal), func() error {
				return withContext(d, func() error { return e.blasFirstUse(d) })
			})
		})
	}
}

// waitBLASFirstUse waits for startBLASFirstUse's goroutines, timing the wait
// as sub-step name.
func (e *engine) waitBLASFirstUse(name string) {
	_ = e.clock.time(name, func() error {
		e.firstUse.Wait()
		return nil
	})
}

// blasFirstUse runs the classifier's product once per prepared batch size on d,
// whose context is current, and frees what it made.
func (e *engine) blasFirstUse(d *device) (err error) {
	var bufs []uintptr
	defer func() {
		for _, p := range bufs {
			err = errors.Join(err, cudadrv.MemFree(p))
		}
	}()
	alloc := func(n int) (uintptr, error) {
		p, err := allocDevice(n)
		if err == nil {
			bufs = append(bufs, p)
		}
		return p, err
	}
	s, err := cudadrv.NewStream()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Destroy()) }()
	h, err := e.newBLAS(s)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Destroy()) }()
	n := e.opts.MaxBatch
	ws, err := alloc(blasWorkspace)
	if err != nil {
		return err
	}
	if err := h.SetWorkspace(ws, blasWorkspace); err != nil {
		return err
	}
	feat, err := alloc(4 * n * e.net.feat)
	if err != nil {
		return err
	}
	out, err := alloc(4 * n * e.net.classes)
	if err != nil {
		return err
	}
	for _, n := range e.opts.Batches {
		if err := classify(h, e.net, d, n, feat, out); err != nil {
			return err
		}
	}
	return s.Synchronize()
}

// newBLAS makes a cuBLAS handle that runs on s with the math mode of the
// engine's precision.
func (e *engine) newBLAS(s cudadrv.Stream) (cublas.Handle, error) {
	h, err := e.blas.Create()
	if err != nil {
		return cublas.Handle{}, err
	}
	math := cublas.DefaultMath
	if e.opts.Precision == backend.TF32 {
		math = cublas.TF32Math
	}
	if err := errors.Join(h.SetStream(s.Pointer()), h.SetMath(math)); err != nil {
		return cublas.Handle{}, errors.Join(err, h.Destroy())
	}
	return h, nil
}

// classify computes the logits of n images, column-major classes x n at out,
// from their float features (feat x n at feat) and d's classifier weights:
// logits^T = W (classes x feat) * feat^T. The bias is added apart.
func classify(h cublas.Handle, net *network, d *device, n int, feat, out uintptr) error {
	return h.Sgemm(cublas.OpT, cublas.OpN, net.classes, n, net.feat, 1,
		d.param(net.fcW), net.feat, feat, net.feat, 0, out, net.classes)
}

//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
)

// GPU memory of other processes (Triton's CUDA shared memory): the engine
// maps an allocation by its CUDA IPC handle into the context of its device
// (OpenIPC), and the workers copy inputs from it and logits to it on their
// copy streams, device to device (CopyInDevice, CopyOutDevice), into and out
// of the same slot buffers as host copies, so that captured graphs serve
// both.

// ipcMapping is another process's allocation mapped into a device's context.
// One mapping serves every OpenIPC of the same handle on the same device (the
// driver maps a handle once per context), counted in opens.
type ipcMapping struct {
	dev    *device
	handle [backend.IPCHandleSize]byte
	ptr    uintptr // the allocation's address in this process
	size   int     // its bytes from ptr on
	opens  int     // OpenIPC calls not yet unmapped
}

var (
	_ backend.DeviceRegistrar = (*engine)(nil)
	_ backend.DeviceWorker    = (*worker)(nil)
)

// deviceOf returns the engine's device with ordinal ord, or nil.
func (e *engine) deviceOf(ord int) *device {
	for _, d := range e.devices {
		if d.ordinal == ord {
			return d
		}
	}
	return nil
}

// OpenIPC maps the allocation handle names into the context of device
// (cuIpcOpenMemHandle, with peer access enabled as needed) and checks that
// the allocation lives on that device (cuPointerGetAttribute, where the
// driver answers) and holds size bytes (cuMemGetAddressRange). unmap closes the mapping
// (cuIpcCloseMemHandle) once no other OpenIPC of the same handle holds it;
// it is idempotent and does nothing after Close, which closes what is left.
func (e *engine) OpenIPC(handle [backend.IPCHandleSize]byte, device, size int) (backend.DeviceMemory, func() error, error) {
	d := e.deviceOf(device)
	if d == nil {
		return backend.DeviceMemory{}, nil, fmt.Errorf("cuda: device %d is not one this server runs on (devices %v)", device, e.opts.Devices)
	}
	e.ipcMu.Lock()
	defer e.ipcMu.Unlock()
	if e.ipcClosed {
		return backend.DeviceMemory{}, nil, errors.New("cuda: engine closed")
	}
	i := slices.IndexFunc(e.ipc, func(m *ipcMapping) bool { return m.dev == d && m.handle == handle })
	var m *ipcMapping
	if i >= 0 {
		m = e.ipc[i]
	} else {
		var err error
		if m, err = openIPC(d, handle); err != nil {
			return backend.DeviceMemory{}, nil, err
		}
	}
	if size > m.size {
		err := fmt.Errorf("cuda: %d bytes registered, but the handle's allocation holds %d", size, m.size)
		if i < 0 {
			err = errors.Join(err, closeIPC(m))
		}
		return backend.DeviceMemory{}, nil, err
	}
	if i < 0 {
		e.ipc = append(e.ipc, m)
	}
	m.opens++
	var once sync.Once
	var uerr error
	return backend.DeviceMemory{Device: device, Ptr: m.ptr, Bytes: size}, func() error {
		once.Do(func() { uerr = e.unmapIPC(m) })
		return uerr
	}, nil
}

// openIPC maps handle into d's context and checks where the memory lives.
func openIPC(d *device, handle [backend.IPCHandleSize]byte) (*ipcMapping, error) {
	m := &ipcMapping{dev: d, handle: handle}
	err := withContext(d, func() error {
		var err error
		if m.ptr, err = cudadrv.IPCOpenMemHandle(handle); err != nil {
			return err
		}
		// A driver that cannot say where the memory lives leaves the check
		// undone: the copies work across devices anyway (peer access).
		if ord, perr := cudadrv.PointerDevice(m.ptr); perr == nil && ord != d.ordinal {
			err = fmt.Errorf("the handle's memory is on device %d, not device %d", ord, d.ordinal)
		}
		var base uintptr
		if err == nil {
			base, m.size, err = cudadrv.MemAddressRange(m.ptr)
			m.size -= int(m.ptr - base)
		}
		if err != nil {
			return errors.Join(err, cudadrv.IPCCloseMemHandle(m.ptr))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: device %d: %w", d.ordinal, err)
	}
	return m, nil
}

// closeIPC unmaps m.
func closeIPC(m *ipcMapping) error {
	err := withContext(m.dev, func() error { return cudadrv.IPCCloseMemHandle(m.ptr) })
	if err != nil {
		return fmt.Errorf("cuda: device %d: %w", m.dev.ordinal, err)
	}
	return nil
}

// unmapIPC undoes one OpenIPC of m, closing the mapping with the last.
func (e *engine) unmapIPC(m *ipcMapping) error {
	e.ipcMu.Lock()
	defer e.ipcMu.Unlock()
	i := slices.Index(e.ipc, m)
	if i < 0 { // Close closed it
		return nil
	}
	if m.opens--; m.opens > 0 {
		return nil
	}
	e.ipc = slices.Delete(e.ipc, i, i+1)
	return closeIPC(m)
}

// closeAllIPC closes every mapping still open (for Close, while the devices'
// contexts are still retained) and refuses later OpenIPC calls.
func (e *engine) closeAllIPC() error {
	e.ipcMu.Lock()
	defer e.ipcMu.Unlock()
	var errs []error
	for _, m := range e.ipc {
		errs = append(errs, closeIPC(m))
	}
	e.ipc, e.ipcClosed = nil, true
	return errors.Join(errs...)
}

// copyDevice enqueues on the stream s a copy of n bytes from src to dst,
// device addresses of the devices with ordinals srcDev and dstDev: within
// one device, or between two of the engine's devices (a peer copy).
func (w *worker) copyDevice(dst uintptr, dstDev int, src uintptr, srcDev, n int, s cudadrv.Stream) error {
	if srcDev == dstDev {
		return cudadrv.MemcpyDtoDAsync(dst, src, n, s)
	}
	sd, dd := w.e.deviceOf(srcDev), w.e.deviceOf(dstDev)
	if sd == nil || dd == nil {
		return fmt.Errorf("cuda: copy from device %d to device %d: not devices of this engine", srcDev, dstDev)
	}
	return cudadrv.MemcpyPeerAsync(dst, dd.ctx, src, sd.ctx, n, s)
}

// CopyInDevice starts the device-to-device copies of parts (float32 values,
// or uint8 bytes) into slot's device input, on the copy-in stream, between
// the slot's copy-in events.
func (w *worker) CopyInDevice(slot int, parts []backend.DeviceMemory, isUint8 bool) error {
	if slot < 0 || slot >= len(w.slots) {
		return fmt.Errorf("cuda: slot %d of %d", slot, len(w.slots))
	}
	s := &w.slots[slot]
	elem, dst := 4, s.in
	if isUint8 {
		elem, dst = 1, s.inU8
	}
	image := elem * 3 * w.e.opts.Height * w.e.opts.Width
	total := 0
	for _, p := range parts {
		if p.Bytes%image != 0 || p.Bytes == 0 {
			return fmt.Errorf("cuda: device part of %d bytes is not whole images of %d bytes", p.Bytes, image)
		}
		total += p.Bytes
	}
	if total == 0 || total > w.e.opts.MaxBatch*image {
		return fmt.Errorf("cuda: %d images, want 1 to %d", total/image, w.e.opts.MaxBatch)
	}
	s.n, s.uint8 = total/image, isUint8
	if err := s.evIn0.Record(w.in); err != nil {
		return w.wrap("copy-in", err)
	}
	off := 0
	for _, p := range parts {
		if err := w.copyDevice(dst+uintptr(off), w.dev.ordinal, p.Ptr, p.Device, p.Bytes, w.in); err != nil {
			return w.wrap("copy-in from device memory", err)
		}
		off += p.Bytes
	}
	return w.wrap("copy-in", s.evIn1.Record(w.in))
}

// CopyOutDevice starts copying the logits of the images outs name into their
// device memory, device to device, and, when host is true, the logits of n
// images to Output(slot), after compute.
func (w *worker) CopyOutDevice(slot, n int, outs []backend.DeviceOutput, host bool) error {
	row := 4 * w.e.net.classes
	for _, o := range outs {
		if o.First < 0 || o.Mem.Bytes <= 0 || o.Mem.Bytes%row != 0 || o.First+o.Mem.Bytes/row > n {
			return fmt.Errorf("cuda: device logits of %d bytes from image %d do not fit a batch of %d", o.Mem.Bytes, o.First, n)
		}
	}
	return w.copyOut(slot, n, outs, host)
}

// CopyOut starts copying the logits of n images to Output(slot), after compute.
func (w *worker) CopyOut(slot, n int) error { return w.copyOut(slot, n, nil, true) }

// copyOut enqueues, on the copy-out stream behind the slot's compute, the
// copy of the logits to the device memory of outs and, with host, to the
// slot's pinned host buffer, between the slot's copy-out events.
func (w *worker) copyOut(slot, n int, outs []backend.DeviceOutput, host bool) error {
	s := &w.slots[slot]
	if n < 1 || n > w.e.opts.MaxBatch {
		return fmt.Errorf("cuda: copy out %d images", n)
	}
	if w.overlap {
		if err := w.out.WaitEvent(s.evComp1); err != nil {
			return w.wrap("copy-out", err)
		}
	}
	if err := s.evOut0.Record(w.out); err != nil {
		return w.wrap("copy-out", err)
	}
	row := 4 * w.e.net.classes
	for _, o := range outs {
		if err := w.copyDevice(o.Mem.Ptr, o.Mem.Device, s.outDev+uintptr(o.First*row), w.dev.ordinal, o.Mem.Bytes, w.out); err != nil {
			return w.wrap("copy-out to device memory", err)
		}
	}
	if host {
		if err := cudadrv.MemcpyDtoHAsync(unsafe.Pointer(&s.out[0]), s.outDev, n*row, w.out); err != nil {
			return w.wrap("copy-out", err)
		}
	}
	return w.wrap("copy-out", s.evOut1.Record(w.out))
}

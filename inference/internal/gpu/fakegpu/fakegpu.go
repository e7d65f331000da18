// Package fakegpu wraps a back-end so that it reads inputs from, and writes
// logits to, "device memory" shared by CUDA IPC handles, as the cuda back-end
// does, with host memory standing in for the GPU's. Tests of CUDA shared
// memory (the server's device path, the front door's registration, bounds
// and in-use accounting) run with it on any machine.
//
//  1. Backend.Alloc makes an allocation of host memory at a fake device
//     address and returns it with the 64-byte handle that names it, as
//     cuIpcGetMemHandle does for a real allocation in the client's process.
//  2. The engine is a backend.DeviceRegistrar: OpenIPC finds a handle's
//     allocation and checks the device and the size as the cuda back-end
//     does; each open is counted until its unmap.
//  3. The workers are backend.DeviceWorkers: CopyInDevice hands the wrapped
//     worker the allocations' bytes as host parts, and Wait copies the
//     logits into the allocations that CopyOutDevice named. Both fail for
//     an address that lies in no allocation mapped at that moment, so a test
//     sees a server that touches a region after unmapping it.
package fakegpu

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// ErrIPC is what OpenIPC returns for a handle that names no allocation, as
// the driver answers cuIpcOpenMemHandle for a handle it cannot open.
var ErrIPC = errors.New("fakegpu: invalid IPC handle (no allocation has it)")

// Backend is a back-end whose engines take device memory. Its methods are
// safe for concurrent use.
type Backend struct {
	inner   backend.Backend
	devices []int // the ordinals that exist

	mu     sync.Mutex
	allocs []*Allocation
	next   uintptr // the next allocation's address
	// openErr, when set, makes every OpenIPC fail with it (a machine that
	// forbids CUDA IPC).
	openErr error
}

// Wrap returns inner with device memory, on devices ordinals 0 to devices-1.
func Wrap(inner backend.Backend, devices int) *Backend {
	b := &Backend{inner: inner, next: 1 << 40}
	for i := range devices {
		b.devices = append(b.devices, i)
	}
	return b
}

// Name is the wrapped back-end's name.
func (b *Backend) Name() string { return b.inner.Name() }

// FailOpen makes every later OpenIPC fail with err (nil: succeed again).
func (b *Backend) FailOpen(err error) {
	b.mu.Lock()
	b.openErr = err
	b.mu.Unlock()
}

// Allocation is fake device memory: host memory at a device address.
type Allocation struct {
	Handle [backend.IPCHandleSize]byte
	Device int
	Ptr    uintptr // its device address
	data   []byte
	opened int // mappings open, under Backend.mu
}

// Bytes is the allocation's memory, which the test reads and writes as the
// client process would its device memory.
func (a *Allocation) Bytes() []byte { return a.data }

// Float32s is the allocation's memory as float32 values (it is 4-byte
// aligned; a trailing partial value is left out).
func (a *Allocation) Float32s() []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(a.data))), len(a.data)/4)
}

// Alloc makes size bytes of zeroed fake memory on device and its handle.
func (b *Backend) Alloc(device, size int) *Allocation {
	words := make([]uint64, (size+7)/8) // 8-byte aligned, as device memory is
	a := &Allocation{Device: device, data: unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), size)}
	rand.Read(a.Handle[:])
	b.mu.Lock()
	a.Ptr = b.next
	b.next += uintptr(size+0xfffff) &^ 0xfffff // apart, as allocations are
	b.allocs = append(b.allocs, a)
	b.mu.Unlock()
	return a
}

// Opened returns how many mappings of allocations are open.
func (b *Backend) Opened() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, a := range b.allocs {
		n += a.opened
	}
	return n
}

// Open opens the wrapped back-end and wraps its engine.
func (b *Backend) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	inner, err := b.inner.Open(m, opts)
	if err != nil {
		return nil, err
	}
	e := &engine{Engine: inner, b: b}
	for _, w := range inner.Workers() {
		fw := &worker{Worker: w, b: b, classes: m.Arch.Classes, pending: make([][]backend.DeviceOutput, w.Slots())}
		if u, ok := w.(backend.Uint8Worker); ok {
			e.workers = append(e.workers, &uint8Worker{fw, u})
		} else {
			e.workers = append(e.workers, fw)
		}
	}
	return e, nil
}

type engine struct {
	backend.Engine
	b       *Backend
	workers []backend.Worker

	mu     sync.Mutex
	closed bool
	unmaps []*Allocation // one entry per open mapping
}

func (e *engine) Workers() []backend.Worker { return e.workers }

// Close unmaps what is still mapped and closes the wrapped engine.
func (e *engine) Close() error {
	e.mu.Lock()
	left := e.unmaps
	e.unmaps, e.closed = nil, true
	e.mu.Unlock()
	e.b.mu.Lock()
	for _, a := range left {
		a.opened--
	}
	e.b.mu.Unlock()
	return e.Engine.Close()
}

// OpenIPC maps the allocation handle names, checking it as the cuda
// back-end does: a device the engine runs on, the allocation's own device,
// and size within it.
func (e *engine) OpenIPC(handle [backend.IPCHandleSize]byte, device, size int) (backend.DeviceMemory, func() error, error) {
	b := e.b
	if !slices.Contains(b.devices, device) {
		return backend.DeviceMemory{}, nil, fmt.Errorf("fakegpu: device %d is not one this engine runs on (%v)", device, b.devices)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openErr != nil {
		return backend.DeviceMemory{}, nil, b.openErr
	}
	i := slices.IndexFunc(b.allocs, func(a *Allocation) bool { return a.Handle == handle })
	if i < 0 {
		return backend.DeviceMemory{}, nil, ErrIPC
	}
	a := b.allocs[i]
	switch {
	case a.Device != device:
		return backend.DeviceMemory{}, nil, fmt.Errorf("fakegpu: the handle's memory is on device %d, not device %d", a.Device, device)
	case size > len(a.data):
		return backend.DeviceMemory{}, nil, fmt.Errorf("fakegpu: %d bytes asked, the handle's allocation holds %d", size, len(a.data))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return backend.DeviceMemory{}, nil, errors.New("fakegpu: engine closed")
	}
	a.opened++
	e.unmaps = append(e.unmaps, a)
	var once sync.Once
	return backend.DeviceMemory{Device: device, Ptr: a.Ptr, Bytes: size}, func() error {
		once.Do(func() {
			e.mu.Lock()
			k := slices.Index(e.unmaps, a)
			if k >= 0 { // else Close unmapped it
				e.unmaps = slices.Delete(e.unmaps, k, k+1)
			}
			e.mu.Unlock()
			if k >= 0 {
				b.mu.Lock()
				a.opened--
				b.mu.Unlock()
			}
		})
		return nil
	}, nil
}

// resolve returns the host bytes of m, which must lie inside an allocation
// that is mapped now.
func (b *Backend) resolve(m backend.DeviceMemory) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.allocs {
		end := a.Ptr + uintptr(len(a.data))
		if m.Ptr >= a.Ptr && m.Ptr < end && uintptr(m.Bytes) <= end-m.Ptr {
			switch {
			case a.opened == 0:
				return nil, fmt.Errorf("fakegpu: %#x is in an allocation that is not mapped", m.Ptr)
			case a.Device != m.Device:
				return nil, fmt.Errorf("fakegpu: %#x is on device %d, not %d", m.Ptr, a.Device, m.Device)
			}
			off := m.Ptr - a.Ptr
			return a.data[off : off+uintptr(m.Bytes)], nil
		}
	}
	return nil, fmt.Errorf("fakegpu: %d bytes at %#x lie in no allocation", m.Bytes, m.Ptr)
}

type worker struct {
	backend.Worker
	b       *Backend
	classes int
	// pending are, per slot, the device logits that Wait writes.
	pending [][]backend.DeviceOutput
}

// CopyInDevice hands the wrapped worker the allocations' bytes.
func (w *worker) CopyInDevice(slot int, parts []backend.DeviceMemory, isUint8 bool) error {
	var floats [][]float32
	var bytes [][]uint8
	for _, p := range parts {
		b, err := w.b.resolve(p)
		if err != nil {
			return err
		}
		if isUint8 {
			bytes = append(bytes, b)
		} else {
			floats = append(floats, unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4))
		}
	}
	if isUint8 {
		u, ok := w.Worker.(backend.Uint8Worker)
		if !ok { // the server sends no uint8 input to such a worker
			return errors.New("fakegpu: the wrapped worker takes no uint8 input")
		}
		return u.CopyInUint8(slot, bytes)
	}
	return w.Worker.CopyIn(slot, floats)
}

// CopyOut is the wrapped worker's, with no device logits.
func (w *worker) CopyOut(slot, n int) error {
	w.pending[slot] = w.pending[slot][:0]
	return w.Worker.CopyOut(slot, n)
}

// CopyOutDevice copies out to the host, and keeps outs for Wait.
func (w *worker) CopyOutDevice(slot, n int, outs []backend.DeviceOutput, host bool) error {
	w.pending[slot] = append(w.pending[slot][:0], outs...)
	return w.Worker.CopyOut(slot, n)
}

// Wait waits for the wrapped worker, then writes the device logits.
func (w *worker) Wait(slot int) (backend.Times, error) {
	t, err := w.Worker.Wait(slot)
	if err != nil {
		return t, err
	}
	out := w.Worker.Output(slot)
	for _, o := range w.pending[slot] {
		dst, err := w.b.resolve(o.Mem)
		if err != nil {
			return t, err
		}
		rows := out[o.First*w.classes:][:len(dst)/4]
		copy(dst, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(rows))), 4*len(rows)))
	}
	w.pending[slot] = w.pending[slot][:0]
	return t, nil
}

// uint8Worker wraps a backend.Uint8Worker and is one too.
type uint8Worker struct {
	*worker
	u backend.Uint8Worker
}

func (w *uint8Worker) CopyInUint8(slot int, parts [][]uint8) error {
	return w.u.CopyInUint8(slot, parts)
}

var (
	_ backend.DeviceRegistrar = (*engine)(nil)
	_ backend.DeviceWorker    = (*worker)(nil)
	_ backend.Uint8Worker     = (*uint8Worker)(nil)
)

package backend

// IPCHandleSize is the size in bytes of a CUDA IPC memory handle
// (CUipcMemHandle, cudaIpcMemHandle_t): what another process's
// cuIpcGetMemHandle returns for one of its device allocations.
const IPCHandleSize = 64

// DeviceMemory is a range of GPU memory that the Engine did not allocate:
// Bytes bytes from address Ptr (a CUdeviceptr, valid in this process) on the
// device with ordinal Device. It is a value: it owns nothing.
type DeviceMemory struct {
	Device int
	Ptr    uintptr
	Bytes  int
}

// IsZero reports whether m names no memory.
func (m DeviceMemory) IsZero() bool { return m.Bytes == 0 }

// Slice returns the n bytes of m from byte off; the caller has checked that
// they lie inside m.
func (m DeviceMemory) Slice(off, n int) DeviceMemory {
	return DeviceMemory{Device: m.Device, Ptr: m.Ptr + uintptr(off), Bytes: n}
}

// DeviceRegistrar is implemented by Engines that can map GPU memory another
// process allocated and shared (Triton's CUDA shared memory: the client
// sends the allocation's CUDA IPC handle), so that their DeviceWorkers copy
// inputs from it and logits to it device to device.
type DeviceRegistrar interface {
	// OpenIPC maps the allocation that handle names (cuIpcOpenMemHandle)
	// and returns its first size bytes, which it checks that the allocation
	// holds, and the function that unmaps it. device is the ordinal of the
	// GPU the allocation lives on, which must be one the Engine runs on.
	// The caller calls unmap only once no batch that reads or writes inside
	// the memory is in flight (every such batch's Wait returned). unmap is
	// idempotent and safe to call after the Engine closed (Close unmaps what
	// is left). Safe for concurrent use.
	OpenIPC(handle [IPCHandleSize]byte, device, size int) (mem DeviceMemory, unmap func() error, err error)
}

// DeviceOutput says where the logits of some images of a batch go in device
// memory: Mem receives the logits of the images from First on, as many as it
// holds (Mem.Bytes is a multiple of the bytes of one image's logits).
type DeviceOutput struct {
	First int
	Mem   DeviceMemory
}

// A DeviceWorker is a Worker that also reads its input from, and writes
// logits to, device memory from its Engine's DeviceRegistrar, copying device
// to device (no host round trip).
type DeviceWorker interface {
	Worker
	// CopyInDevice is CopyIn (CopyInUint8 when uint8 is true) for parts in
	// device memory: each holds whole images of float32 values (uint8
	// bytes), which must stay unchanged until Wait(slot) returns.
	CopyInDevice(slot int, parts []DeviceMemory, uint8 bool) error
	// CopyOutDevice is CopyOut that also copies the logits of the images
	// that outs name into their device memory. Only when host is true does
	// Output(slot) hold the logits of the whole batch after Wait; either
	// way, Wait returns once every copy is done.
	CopyOutDevice(slot, n int, outs []DeviceOutput, host bool) error
}

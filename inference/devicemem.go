package inference

import (
	"errors"
	"fmt"

	"github.com/inferbench/inferbench/inference/backend"
)

// ErrNoDeviceIO is returned by OpenIPC when the server's back-end cannot read
// or write device memory that it did not allocate (every back-end but cuda).
var ErrNoDeviceIO = errors.New("inference: CUDA shared memory needs the cuda back-end")

// BackendName is the name of the back-end the server runs on
// (backend.Backend.Name: "cpu", "cuda", ...).
func (s *Server) BackendName() string { return s.backendName }

// DeviceIO reports whether the server takes inputs in, and writes logits to,
// device memory mapped with OpenIPC: its engine is a
// backend.DeviceRegistrar and every worker a backend.DeviceWorker (cuda).
func (s *Server) DeviceIO() bool { return s.deviceIO }

// OpenIPC maps the GPU memory that a CUDA IPC memory handle names (the
// cudaIpcMemHandle_t, 64 bytes, that another process's cudaIpcGetMemHandle
// made for one of its allocations, on the GPU with ordinal device) and
// returns its first size bytes, checked to lie inside the allocation, for
// Request inputs (Tensor.Device) and Request.DeviceLogits. Batches copy
// from and to it device to device. Call unmap, once, only when no request
// using the memory is unanswered (a request that Close answered early: after
// Close returned); it is safe after Close.
//
// It fails with ErrNoDeviceIO unless DeviceIO, and with the driver's error
// for a handle it cannot open (one made in this same process, say: CUDA
// opens handles of other processes only). It is safe for concurrent use.
func (s *Server) OpenIPC(handle []byte, device int, size int64) (mem DeviceMemory, unmap func() error, err error) {
	if !s.deviceIO {
		return DeviceMemory{}, nil, fmt.Errorf("%w (this server runs %s)", ErrNoDeviceIO, s.backendName)
	}
	if len(handle) != backend.IPCHandleSize {
		return DeviceMemory{}, nil, fmt.Errorf("inference: a CUDA IPC memory handle has %d bytes, got %d", backend.IPCHandleSize, len(handle))
	}
	if size < 1 || size > int64(maxInt) {
		return DeviceMemory{}, nil, fmt.Errorf("inference: device memory of %d bytes: want 1 to %d", size, maxInt)
	}
	var h [backend.IPCHandleSize]byte
	copy(h[:], handle)
	mem, unmap, err = s.eng.(backend.DeviceRegistrar).OpenIPC(h, device, int(size))
	if err != nil {
		return DeviceMemory{}, nil, fmt.Errorf("inference: opening a CUDA IPC memory handle of device %d: %w", device, err)
	}
	return mem, unmap, nil
}

const maxInt = int(^uint(0) >> 1)

// supportsDeviceIO reports whether eng and its workers read and write device
// memory from OpenIPC.
func supportsDeviceIO(eng backend.Engine, workers []backend.Worker) bool {
	if _, ok := eng.(backend.DeviceRegistrar); !ok {
		return false
	}
	for _, w := range workers {
		if _, ok := w.(backend.DeviceWorker); !ok {
			return false
		}
	}
	return true
}

// checkDevice refuses a request with an input or logits in device memory
// that the server cannot take: device logits of the wrong size, or beside
// host logits; a back-end that reads no device memory; a uint8 input it
// would have to normalise on the host.
func (s *Server) checkDevice(req *Request, n int) error {
	in, out := !req.Input.Device.IsZero(), !req.DeviceLogits.IsZero()
	if !in && !out {
		return nil
	}
	if out {
		if req.Logits != nil {
			return &InputError{Field: "logits buffer", Want: "Logits or DeviceLogits, not both", Got: "both"}
		}
		if want := 4 * n * s.classes; req.DeviceLogits.Bytes != want {
			return &InputError{Field: "logits buffer", Want: fmt.Sprintf("%d bytes of device memory", want), Got: fmt.Sprintf("%d bytes", req.DeviceLogits.Bytes)}
		}
	}
	where := "device memory"
	if !s.deviceIO {
		return &InputError{Field: where, Want: "host memory: " + ErrNoDeviceIO.Error(), Got: "device memory (this server runs " + s.backendName + ")"}
	}
	if in && req.Input.Datatype == Uint8 && !s.deviceUint8 {
		return &InputError{Field: where, Want: "fp32 input (this back-end normalises uint8 input on the host)", Got: "uint8 input in device memory"}
	}
	return nil
}

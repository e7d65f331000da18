//go:build cuda && linux && cgo

package cuda

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/resnet"
)

// TestDeviceCopies runs a batch from device memory (as a client's CUDA
// shared-memory region would be, here allocated in this process) through
// CopyInDevice and CopyOutDevice, float32 and uint8: the logits written to
// device memory, and those copied to the host alongside, equal the logits of
// the same images copied in from the host, bit for bit. (cuIpcOpenMemHandle
// refuses a handle of this same process, so OpenIPC is tested across
// processes: the root package's TestCudaSharedMemoryAcrossProcesses.)
func TestDeviceCopies(t *testing.T) {
	requireGPU(t)
	const n, h, w = 4, 64, 64
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	for _, graphs := range []bool{false, true} {
		t.Run(map[bool]string{false: "graphs=off", true: "graphs=on"}[graphs], func(t *testing.T) {
			be, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: n, Height: h, Width: w,
				Precision: backend.FP16, Pipeline: backend.Overlap, Graphs: graphs, Batches: []int{n}})
			require.NoError(t, err)
			e := be.(*engine)
			defer e.Close()
			d := e.devices[0]
			classes := e.net.classes
			floats := randomInput(n, h, w, 9)
			bytes := randomBytes(n, h, w, 9)
			fromHost := run(t, e, [][]float32{floats}, n)
			wantU8 := func() []float32 {
				runBatch(t, e, n, func(wk backend.Worker) error { return wk.(backend.Uint8Worker).CopyInUint8(0, [][]uint8{bytes}) })
				return logitsOf(e, n)
			}()

			// Device memory: the images (split in two parts, the second not
			// at the start of its allocation) and room for the logits.
			var in, inU8, out uintptr
			require.NoError(t, withContext(d, func() error {
				var err error
				if in, err = cudadrv.MemAlloc(4*len(floats) + 256); err != nil {
					return err
				}
				if inU8, err = cudadrv.MemAlloc(len(bytes)); err != nil {
					return err
				}
				if out, err = cudadrv.MemAlloc(4 * n * classes); err != nil {
					return err
				}
				if err := cudadrv.MemcpyHtoD(in+256, unsafe.Pointer(&floats[0]), 4*len(floats)); err != nil {
					return err
				}
				return cudadrv.MemcpyHtoD(inU8, unsafe.Pointer(&bytes[0]), len(bytes))
			}))
			defer withContext(d, func() error { return errors.Join(cudadrv.MemFree(in), cudadrv.MemFree(inU8), cudadrv.MemFree(out)) })
			image := 4 * 3 * h * w
			parts := []backend.DeviceMemory{{Ptr: in + 256, Bytes: image}, {Ptr: in + 256 + uintptr(image), Bytes: (n - 1) * image}}
			dev := func() []float32 {
				got := make([]float32, n*classes)
				require.NoError(t, withContext(d, func() error { return cudadrv.MemcpyDtoH(unsafe.Pointer(&got[0]), out, len(got)*4) }))
				return got
			}
			for _, host := range []bool{false, true} {
				wk := e.workers[0]
				release, err := wk.Bind()
				require.NoError(t, err)
				clear(wk.slots[0].out)
				require.NoError(t, wk.CopyInDevice(0, parts, false))
				require.NoError(t, wk.Compute(0, n))
				// Image 0's logits in one place, images 1.. in the next.
				outs := []backend.DeviceOutput{{First: 0, Mem: backend.DeviceMemory{Ptr: out, Bytes: 4 * classes}},
					{First: 1, Mem: backend.DeviceMemory{Ptr: out + uintptr(4*classes), Bytes: 4 * (n - 1) * classes}}}
				require.NoError(t, wk.CopyOutDevice(0, n, outs, host))
				_, err = wk.Wait(0)
				release()
				require.NoError(t, err)
				assert.Equal(t, fromHost, dev(), "device logits (host copy too: %v)", host)
				if host {
					assert.Equal(t, fromHost, logitsOf(e, n), "host logits beside device logits")
				} else {
					assert.Equal(t, make([]float32, n*classes), logitsOf(e, n), "no host copy asked for")
				}
			}
			runBatch(t, e, n, func(wk backend.Worker) error {
				return wk.(backend.DeviceWorker).CopyInDevice(0, []backend.DeviceMemory{{Ptr: inU8, Bytes: len(bytes)}}, true)
			})
			assert.Equal(t, wantU8, logitsOf(e, n), "uint8 input from device memory")

			wk := e.workers[0]
			assert.ErrorContains(t, wk.CopyInDevice(0, []backend.DeviceMemory{{Ptr: in, Bytes: image - 4}}, false), "not whole images")
			assert.ErrorContains(t, wk.CopyInDevice(0, nil, false), "0 images")
			assert.ErrorContains(t, wk.CopyOutDevice(0, 1, []backend.DeviceOutput{{First: 1, Mem: backend.DeviceMemory{Ptr: out, Bytes: 4 * classes}}}, false), "do not fit")
		})
	}
}

// TestOpenIPCInThisProcess: the driver refuses to open a handle that this
// same process made, and OpenIPC says so; it refuses devices the engine does
// not run on, and does not open after Close.
func TestOpenIPCInThisProcess(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	be, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 1, Height: 32, Width: 32, Batches: []int{1}})
	require.NoError(t, err)
	e := be.(*engine)
	defer e.Close()
	var p uintptr
	var handle [backend.IPCHandleSize]byte
	require.NoError(t, withContext(e.devices[0], func() error {
		var err error
		if p, err = cudadrv.MemAlloc(1 << 20); err != nil {
			return err
		}
		handle, err = cudadrv.IPCGetMemHandle(p)
		return err
	}))
	_, _, err = e.OpenIPC(handle, 0, 1<<20)
	require.Error(t, err)
	t.Logf("OpenIPC of this process's own handle: %v", err)
	assert.ErrorContains(t, err, "cuIpcOpenMemHandle")
	_, _, err = e.OpenIPC(handle, 7, 1<<20)
	assert.ErrorContains(t, err, "device 7 is not one this server runs on")
	require.NoError(t, withContext(e.devices[0], func() error { return cudadrv.MemFree(p) }))
	require.NoError(t, e.Close())
	_, _, err = e.OpenIPC(handle, 0, 1<<20)
	assert.ErrorContains(t, err, "engine closed")
}

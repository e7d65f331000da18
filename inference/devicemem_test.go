package inference_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/cpu"
	"github.com/inferbench/inferbench/inference/internal/gpu/fakegpu"
	"github.com/inferbench/inferbench/inference/nop"
)

const devSide = 32

// devImage is the bytes of one fp32 image of devSide x devSide.
const devImage = 4 * 3 * devSide * devSide

func devServer(t *testing.T, be *fakegpu.Backend, cfg inference.Config) *inference.Server {
	t.Helper()
	cfg.Backend, cfg.Model, cfg.Height, cfg.Width = be, tinyModel(t), devSide, devSide
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 4
	}
	s, err := inference.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func randomFloats(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 5))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// open maps a for s and unmaps it at cleanup.
func open(t *testing.T, s *inference.Server, a *fakegpu.Allocation, size int) inference.DeviceMemory {
	t.Helper()
	mem, unmap, err := s.OpenIPC(a.Handle[:], a.Device, int64(size))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, unmap()) })
	return mem
}

func TestDeviceIO(t *testing.T) {
	for _, name := range []string{"nop", "cpu"} {
		t.Run(name, func(t *testing.T) {
			s, err := inference.New(inference.Config{Options: inference.Options{Height: devSide, Width: devSide, MaxBatch: 2}, BackendName: name, Model: tinyModel(t)})
			require.NoError(t, err)
			defer s.Close()
			assert.False(t, s.DeviceIO())
			_, _, err = s.OpenIPC(make([]byte, 64), 0, 16)
			assert.ErrorIs(t, err, inference.ErrNoDeviceIO)
			assert.ErrorContains(t, err, "CUDA shared memory needs the cuda back-end (this server runs "+name+")")
			_, err = s.Infer(context.Background(), inference.Tensor{Shape: []int{1, 3, devSide, devSide}, Device: inference.DeviceMemory{Ptr: 1 << 40, Bytes: devImage}})
			var ie *inference.InputError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, "device memory", ie.Field)
		})
	}
	be := fakegpu.Wrap(nop.New(), 1)
	assert.True(t, devServer(t, be, inference.Config{}).DeviceIO())
}

func TestOpenIPCErrors(t *testing.T) {
	be := fakegpu.Wrap(nop.New(), 2)
	s := devServer(t, be, inference.Config{})
	a := be.Alloc(1, 100)
	unknown := be.Alloc(0, 100).Handle
	unknown[0] ^= 1 // no allocation has this handle
	tests := []struct {
		name    string
		handle  []byte
		device  int
		size    int64
		errText string
	}{
		{"short handle", a.Handle[:63], 1, 100, "a CUDA IPC memory handle has 64 bytes, got 63"},
		{"long handle", append(a.Handle[:], 0), 1, 100, "got 65"},
		{"no size", a.Handle[:], 1, 0, "device memory of 0 bytes"},
		{"unknown handle", unknown[:], 0, 10, fakegpu.ErrIPC.Error()},
		{"wrong device", a.Handle[:], 0, 100, "the handle's memory is on device 1, not device 0"},
		{"no such device", a.Handle[:], 5, 100, "device 5 is not one this engine runs on"},
		{"larger than the allocation", a.Handle[:], 1, 101, "101 bytes asked, the handle's allocation holds 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := s.OpenIPC(tt.handle, tt.device, tt.size)
			require.Error(t, err)
			assert.ErrorContains(t, err, tt.errText)
		})
	}
	assert.Zero(t, be.Opened())
	mem, unmap, err := s.OpenIPC(a.Handle[:], 1, 60)
	require.NoError(t, err)
	assert.Equal(t, inference.DeviceMemory{Device: 1, Ptr: a.Ptr, Bytes: 60}, mem)
	assert.Equal(t, 1, be.Opened())
	require.NoError(t, unmap())
	require.NoError(t, unmap(), "unmap is idempotent")
	assert.Zero(t, be.Opened())
	_, unmap, err = s.OpenIPC(a.Handle[:], 1, 60)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.Zero(t, be.Opened(), "Close unmaps what is left")
	assert.NoError(t, unmap(), "unmap after Close")
}

// TestDeviceInference runs requests whose input, logits or both are in
// device memory, alone and merged with host requests into batches, through
// both pipelines: every answer equals the host path's.
func TestDeviceInference(t *testing.T) {
	for _, pipe := range []inference.Pipeline{inference.Serial, inference.Overlap} {
		t.Run(pipe.String(), func(t *testing.T) {
			be := fakegpu.Wrap(cpu.New(), 1)
			s := devServer(t, be, inference.Config{Options: inference.Options{Pipeline: pipe, Workers: 2, MaxBatch: 8}, MaxQueueDelay: 2 * time.Millisecond})
			classes := s.Classes()
			const clients, rounds = 6, 5
			in := be.Alloc(0, clients*2*devImage)
			out := be.Alloc(0, clients*2*4*classes)
			inMem, outMem := open(t, s, in, len(in.Bytes())), open(t, s, out, len(out.Bytes()))
			var wg sync.WaitGroup
			errs := make(chan error, clients*rounds)
			for c := range clients {
				wg.Go(func() {
					n := 1 + c%2
					for r := range rounds {
						images := randomFloats(n*devImage/4, uint64(100*c+r))
						want, err := s.Infer(context.Background(), inference.Tensor{Shape: []int{n, 3, devSide, devSide}, Data: images})
						if err != nil {
							errs <- err
							return
						}
						copy(in.Float32s()[c*2*devImage/4:], images)
						req := inference.Request{Input: inference.Tensor{Shape: []int{n, 3, devSide, devSide}, Data: images}}
						devIn, devOut := (c+r)%3 != 1, (c+r)%3 != 0 // both, input only or output only
						if devIn {
							req.Input = inference.Tensor{Shape: []int{n, 3, devSide, devSide}, Device: inMem.Slice(c*2*devImage, n*devImage)}
						}
						if devOut {
							req.DeviceLogits = outMem.Slice(c*2*4*classes, n*4*classes)
						}
						call, err := s.Submit(context.Background(), req)
						if err != nil {
							errs <- err
							return
						}
						resp, err := call.Result()
						if err != nil {
							errs <- err
							return
						}
						got := resp.Logits.Data
						if devOut {
							if got != nil {
								errs <- fmt.Errorf("client %d: logits in device memory and in the answer", c)
							}
							got = out.Float32s()[c*2*classes:][:n*classes]
						}
						if !assert.Equal(t, want.Logits.Data, got, "client %d round %d (device input %v, device logits %v)", c, r, devIn, devOut) {
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			st := s.Stats()
			assert.Equal(t, uint64(2*clients*rounds), st.Completed)
		})
	}
}

// TestDeviceUint8 sends uint8 images in device memory to a back-end that
// normalises on the device (nop): the logits are those of the same bytes
// from host memory.
func TestDeviceUint8(t *testing.T) {
	be := fakegpu.Wrap(nop.New(), 1)
	s := devServer(t, be, inference.Config{})
	require.True(t, s.Uint8OnDevice())
	b := randomImages(2, devSide, devSide, 7)
	a := be.Alloc(0, len(b))
	copy(a.Bytes(), b)
	mem := open(t, s, a, len(b))
	fromHost, err := s.Infer(context.Background(), inference.Tensor{Shape: []int{2, 3, devSide, devSide}, Datatype: inference.Uint8, Bytes: b})
	require.NoError(t, err)
	fromDevice, err := s.Infer(context.Background(), inference.Tensor{Shape: []int{2, 3, devSide, devSide}, Datatype: inference.Uint8, Device: mem})
	require.NoError(t, err)
	assert.Equal(t, fromHost.Logits.Data, fromDevice.Logits.Data)
}

func TestDeviceInputErrors(t *testing.T) {
	be := fakegpu.Wrap(cpu.New(), 1) // normalises uint8 on the host
	s := devServer(t, be, inference.Config{})
	a := be.Alloc(0, 4*devImage)
	mem := open(t, s, a, 4*devImage)
	shape := []int{1, 3, devSide, devSide}
	logits := 4 * s.Classes()
	tests := []struct {
		name    string
		req     inference.Request
		field   string
		errText string
	}{
		{"device memory too small", inference.Request{Input: inference.Tensor{Shape: shape, Device: mem.Slice(0, devImage-4)}},
			"data", fmt.Sprintf("want %d bytes of device memory for fp32 shape [1 3 32 32], got %d bytes", devImage, devImage-4)},
		{"device memory too large", inference.Request{Input: inference.Tensor{Shape: shape, Device: mem.Slice(0, 2*devImage)}}, "data", ""},
		{"device and host data", inference.Request{Input: inference.Tensor{Shape: shape, Device: mem.Slice(0, devImage), Data: make([]float32, devImage/4)}}, "data", "not both"},
		{"uint8 normalised on the host", inference.Request{Input: inference.Tensor{Shape: shape, Datatype: inference.Uint8, Device: mem.Slice(0, devImage/4)}},
			"device memory", "this back-end normalises uint8 input on the host"},
		{"device logits of the wrong size", inference.Request{Input: inference.Tensor{Shape: shape, Device: mem.Slice(0, devImage)}, DeviceLogits: mem.Slice(devImage, logits+4)},
			"logits buffer", fmt.Sprintf("want %d bytes of device memory", logits)},
		{"device and host logits", inference.Request{Input: inference.Tensor{Shape: shape, Device: mem.Slice(0, devImage)}, DeviceLogits: mem.Slice(devImage, logits), Logits: make([]float32, s.Classes())},
			"logits buffer", "Logits or DeviceLogits, not both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Submit(context.Background(), tt.req)
			var ie *inference.InputError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, tt.field, ie.Field)
			if tt.errText != "" {
				assert.ErrorContains(t, err, tt.errText)
			}
		})
	}
	rs, err := inference.New(inference.Config{Options: inference.Options{Height: devSide, Width: devSide, MaxBatch: 1}, Backend: be, Model: tinyModel(t), RejectNonFinite: true})
	require.NoError(t, err)
	defer rs.Close()
	m2 := open(t, rs, a, devImage)
	_, err = rs.Infer(context.Background(), inference.Tensor{Shape: shape, Device: m2})
	var ie *inference.InputError
	require.ErrorAs(t, err, &ie)
	assert.Equal(t, "value", ie.Field, "RejectNonFinite cannot check device memory")
}

// TestDeviceMemoryUnmappedFails: a batch whose device memory is no longer
// mapped fails with the back-end's error instead of touching it.
func TestDeviceMemoryUnmappedFails(t *testing.T) {
	be := fakegpu.Wrap(nop.New(), 1)
	s := devServer(t, be, inference.Config{})
	a := be.Alloc(0, devImage)
	mem, unmap, err := s.OpenIPC(a.Handle[:], 0, devImage)
	require.NoError(t, err)
	require.NoError(t, unmap())
	_, err = s.Infer(context.Background(), inference.Tensor{Shape: []int{1, 3, devSide, devSide}, Device: mem})
	var we *inference.WorkerError
	require.ErrorAs(t, err, &we)
	assert.ErrorContains(t, err, "not mapped")
	assert.False(t, errors.Is(err, inference.ErrBadInput))
	ok, _ := s.Ready()
	assert.True(t, ok, "a failed batch leaves the worker in service")
}

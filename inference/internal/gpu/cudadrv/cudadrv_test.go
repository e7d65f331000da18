//go:build cuda && linux && cgo

package cudadrv

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/internal/gpu/dl"
)

func TestSymbolNames(t *testing.T) {
	names := symbolNames()
	seen := map[string]bool{}
	for _, n := range names {
		assert.False(t, seen[n], "symbol %s listed twice", n)
		seen[n] = true
	}
	// cuda.h maps these API names to versioned symbols; a program linked
	// against the headers calls the versioned ones, and so must we.
	for _, want := range []string{"cuInit", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoDAsync_v2",
		"cuStreamBeginCapture_v2", "cuStreamDestroy_v2", "cuEventDestroy_v2", "cuDevicePrimaryCtxRelease_v2",
		"cuDeviceTotalMem_v2", "cuLaunchHostFunc", "cuModuleLoadData", "cuLaunchKernel", "cuGraphUpload", "cuMemHostRegister_v2", "cuMemHostUnregister",
		"cuIpcOpenMemHandle_v2", "cuMemGetAddressRange_v2", "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoH_v2"} {
		assert.True(t, seen[want], "symbol table lacks %s: %v", want, names)
	}
	assert.False(t, seen["cuMemAlloc"], "unversioned cuMemAlloc would be the CUDA 3.1 ABI")
}

func TestLoadMissingLibrary(t *testing.T) {
	err := load([]string{"libcuda-not-there.so.1"})
	require.Error(t, err)
	assert.ErrorContains(t, err, "libcuda-not-there.so.1")
}

// TestLoadDriverLibrary resolves the whole table in the driver library of this
// machine, when it has one: with a GPU or not, every symbol must be there.
func TestLoadDriverLibrary(t *testing.T) {
	lib, err := dl.Open(libraries...)
	if err != nil {
		t.Skipf("no driver library here: %v", err)
	}
	require.NoError(t, lib.Close())
	require.NoError(t, load(libraries))
}

func TestInitOnce(t *testing.T) {
	first := Init()
	second := Init()
	assert.Equal(t, first, second, "Init returns the first call's result")
	if first != nil {
		t.Logf("no usable driver: %v", first)
		return
	}
	n, err := DeviceCount()
	require.NoError(t, err)
	assert.Positive(t, n, "cuInit succeeded, so there is a device")
}

// onDevice runs f on a locked thread with device 0's primary context current,
// or skips the test when there is no usable GPU.
func onDevice(t testing.TB, f func(d Device)) {
	t.Helper()
	if err := Init(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	d, err := GetDevice(0)
	require.NoError(t, err)
	ctx, err := d.RetainPrimaryContext()
	require.NoError(t, err)
	defer func() { require.NoError(t, d.ReleasePrimaryContext()) }()
	defer inContext(t, ctx)()
	f(d)
}

func TestDeviceCopies(t *testing.T) {
	onDevice(t, func(d Device) {
		name, err := d.Name()
		require.NoError(t, err)
		mem, err := d.TotalMem()
		require.NoError(t, err)
		major, err := d.Attribute(ComputeCapabilityMajor)
		require.NoError(t, err)
		t.Logf("%s, %d MiB, compute capability %d", name, mem>>20, major)
		assert.NotEmpty(t, name)
		assert.Positive(t, mem)

		const n = 1 << 20
		host, err := HostAlloc(4 * n)
		require.NoError(t, err)
		defer func() { require.NoError(t, HostFree(host)) }()
		src := unsafe.Slice((*float32)(host), n)
		for i := range src {
			src[i] = float32(i)
		}
		dev, err := MemAlloc(4 * n)
		require.NoError(t, err)
		defer func() { require.NoError(t, MemFree(dev)) }()
		s, err := NewStream()
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Destroy()) }()
		require.NoError(t, MemcpyHtoDAsync(dev, host, 4*n, s))
		back := make([]float32, n)
		require.NoError(t, MemcpyDtoHAsync(unsafe.Pointer(&back[0]), dev, 4*n, s))
		require.NoError(t, s.Synchronize())
		assert.Equal(t, src, back)
	})
}

// TestGate checks that work behind a gate waits for Open, and that events time
// what ran after it.
func TestGate(t *testing.T) {
	onDevice(t, func(d Device) {
		s, err := NewStream()
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Destroy()) }()
		before, err := NewEvent()
		require.NoError(t, err)
		after, err := NewEvent()
		require.NoError(t, err)
		defer func() { require.NoError(t, before.Destroy()); require.NoError(t, after.Destroy()) }()

		g, err := HoldStream(s)
		require.NoError(t, err)
		require.NoError(t, before.Record(s))
		require.NoError(t, after.Record(s))
		time.Sleep(50 * time.Millisecond)
		done, err := after.Done()
		require.NoError(t, err)
		assert.False(t, done, "an event behind a closed gate completed")
		require.NoError(t, g.Open())
		require.NoError(t, after.Synchronize())
		g.Free()
		span, err := after.Since(before)
		require.NoError(t, err)
		assert.Less(t, span, time.Millisecond, "two events back to back after the gate")
	})
}

// TestGateExpires checks that a gate nobody opens lets its stream go on at
// its limit, and that Open then says so.
func TestGateExpires(t *testing.T) {
	onDevice(t, func(d Device) {
		s, err := NewStream()
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Destroy()) }()
		t0 := time.Now()
		g, err := HoldStreamFor(s, 50*time.Millisecond)
		require.NoError(t, err)
		require.NoError(t, s.Synchronize(), "the stream goes on by itself")
		waited := time.Since(t0)
		assert.ErrorIs(t, g.Open(), ErrGateExpired)
		g.Free()
		assert.GreaterOrEqual(t, waited, 50*time.Millisecond)
		assert.Less(t, waited, 2*time.Second)
	})
}

// BenchmarkHostAlloc times cuMemHostAlloc of one buffer of each size: what a
// server's pool of pinned input buffers grows by (750,000 bytes is one
// 3x250x250 float32 image, 48,000,000 are 64 of them). Frees are not timed.
func BenchmarkHostAlloc(b *testing.B) {
	onDevice(b, func(Device) {
		ctx, err := CurrentContext()
		require.NoError(b, err)
		for _, size := range []int{750_000, 48_000_000} {
			b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
				defer inContext(b, ctx)()
				b.SetBytes(int64(size))
				var ps []unsafe.Pointer
				free := func() {
					for _, p := range ps {
						require.NoError(b, HostFree(p))
					}
					ps = ps[:0]
				}
				defer free()
				for b.Loop() {
					p, err := HostAlloc(size)
					require.NoError(b, err)
					ps = append(ps, p)
					if len(ps) == 16 {
						b.StopTimer()
						free()
						b.StartTimer()
					}
				}
			})
		}
	})
}

// BenchmarkCopyBesideHostAlloc times a 4 KiB host-to-device copy and its
// stream's synchronisation, alone and while another thread allocates
// 750,000-byte pinned buffers without pause: whether an allocation holds up
// the other CUDA calls of the process. It reports the round trips' p50, p99
// and max, and the allocations made meanwhile.
func BenchmarkCopyBesideHostAlloc(b *testing.B) {
	onDevice(b, func(Device) {
		ctx, err := CurrentContext()
		require.NoError(b, err)
		host, err := HostAlloc(4096)
		require.NoError(b, err)
		defer func() { require.NoError(b, HostFree(host)) }()
		dev, err := MemAlloc(4096)
		require.NoError(b, err)
		defer func() { require.NoError(b, MemFree(dev)) }()
		s, err := NewStream()
		require.NoError(b, err)
		defer func() { require.NoError(b, s.Destroy()) }()
		for _, beside := range []bool{false, true} {
			b.Run(fmt.Sprintf("allocating=%v", beside), func(b *testing.B) {
				defer inContext(b, ctx)()
				var stop atomic.Bool
				var allocs atomic.Int64
				var wg sync.WaitGroup
				if beside {
					wg.Go(func() {
						runtime.LockOSThread() // ends with the goroutine
						if err := SetCurrentContext(ctx); err != nil {
							b.Error(err)
							return
						}
						for !stop.Load() {
							p, err := HostAlloc(750_000)
							if err != nil {
								b.Error(err)
								return
							}
							allocs.Add(1)
							if err := HostFree(p); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				var took []time.Duration
				for b.Loop() {
					t0 := time.Now()
					require.NoError(b, MemcpyHtoDAsync(dev, host, 4096, s))
					require.NoError(b, s.Synchronize())
					took = append(took, time.Since(t0))
				}
				stop.Store(true)
				wg.Wait()
				slices.Sort(took)
				at := func(q float64) float64 { return float64(took[int(q*float64(len(took)-1))]) }
				b.ReportMetric(at(0.5), "p50-ns")
				b.ReportMetric(at(0.99), "p99-ns")
				b.ReportMetric(float64(took[len(took)-1]), "max-ns")
				b.ReportMetric(float64(allocs.Load()), "allocs")
			})
		}
	})
}

// inContext locks the calling goroutine (a sub-benchmark's, say) to its thread
// and makes ctx current there; the function it returns, which the same
// goroutine must call, undoes both.
func inContext(t testing.TB, ctx Context) (undo func()) {
	runtime.LockOSThread()
	require.NoError(t, SetCurrentContext(ctx))
	return func() {
		require.NoError(t, SetCurrentContext(Context{}))
		runtime.UnlockOSThread()
	}
}

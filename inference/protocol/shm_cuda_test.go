//go:build cuda && linux

package protocol_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
)

// TestSharedMemoryOnCUDA serves on the GPU: the regions are page-locked at
// registration (Server.RegisterHost), the input is copied in straight from
// the input region, and the logits written into the output region equal the
// server's in-process answer for the same images bit for bit, with and
// without staging buffers (PinnedInput).
func TestSharedMemoryOnCUDA(t *testing.T) {
	probe, err := inference.New(inference.Config{Options: inference.Options{Height: side, Width: side, MaxBatch: 1}, BackendName: "cuda", Model: tinyModel(t)})
	if errors.Is(err, backend.ErrNoGPU) {
		t.Skipf("no CUDA device: %v", err)
	}
	require.NoError(t, err)
	probe.Close()
	for _, pinnedInput := range []bool{false, true} {
		t.Run(map[bool]string{false: "staging", true: "pinned-input"}[pinnedInput], func(t *testing.T) {
			// Regions on tmpfs, as POSIX shared memory is: CUDA does not
			// page-lock file mappings of every file system.
			dir, err := os.MkdirTemp("/dev/shm", "inferbench-test-")
			require.NoError(t, err)
			t.Cleanup(func() { os.RemoveAll(dir) })
			o := fixtureOpts{cfg: inference.Config{Options: inference.Options{PinnedInput: pinnedInput, Batches: []int{1, 4}}, BackendName: "cuda"}}
			o.opts.SharedMemory.Dir = dir
			o.opts.SharedMemory.Enabled = true
			f := newFixture(t, o)
			ctx := context.Background()
			in := newObject(t, dir, "/in", 4*imageBytes)
			out := newObject(t, dir, "/out", 4*4*classes)
			for name, c := range f.shmClients(t) {
				require.NoError(t, c.RegisterSystemSharedMemory(ctx, "in", "/in", 0, 4*imageBytes), name)
				require.NoError(t, c.RegisterSystemSharedMemory(ctx, "out", "/out", 0, 4*4*classes), name)
				for _, n := range []int{1, 4} {
					images := randomImages(uint64(20+n), n)
					in.writeFloats(0, images)
					_, err := c.Infer(ctx, shmRequest(n, 0, 0))
					require.NoError(t, err, name)
					assert.Equal(t, bits(f.inProcess(t, images)), bits(out.readFloats(0, n*classes)), "%s batch %d", name, n)
				}
				require.NoError(t, c.UnregisterSystemSharedMemory(ctx, ""), name)
			}
		})
	}
}

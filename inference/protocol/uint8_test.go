package protocol_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/resnet"
)

// byteCounter wraps the nop back-end, whose workers normalise uint8 input
// themselves (as the cuda back-end does on the GPU), and counts the images
// that reach them as bytes, and those of them in memory its AllocHost did not
// hand out (on CUDA, pageable memory: a slow copy, and wrong under
// Config.PinnedInput).
type byteCounter struct {
	images, foreign atomic.Int64

	mu    sync.Mutex
	alloc map[*float32]int // AllocHost's blocks: first value, length in bytes
}

func (b *byteCounter) Name() string { return "bytecounter" }

func (b *byteCounter) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	e, err := nop.New().Open(m, opts)
	if err != nil {
		return nil, err
	}
	ws := e.Workers()
	for i, w := range ws {
		ws[i] = countingWorker{Uint8Worker: w.(backend.Uint8Worker), b: b, per: 3 * opts.Height * opts.Width}
	}
	return allocEngine{Engine: e, b: b}, nil
}

// allocEngine is the nop engine with an allocator whose blocks byteCounter
// knows.
type allocEngine struct {
	backend.Engine
	b *byteCounter
}

func (e allocEngine) AllocHost(n int) ([]float32, error) {
	p := make([]float32, n)
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if e.b.alloc == nil {
		e.b.alloc = map[*float32]int{}
	}
	e.b.alloc[unsafe.SliceData(p)] = 4 * n
	return p, nil
}

func (e allocEngine) FreeHost(p []float32) error {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	delete(e.b.alloc, unsafe.SliceData(p))
	return nil
}

// allocated reports whether p lies in one block from AllocHost.
func (b *byteCounter) allocated(p []byte) bool {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	b.mu.Lock()
	defer b.mu.Unlock()
	for first, size := range b.alloc {
		s := uintptr(unsafe.Pointer(first))
		if start >= s && start+uintptr(len(p)) <= s+uintptr(size) {
			return true
		}
	}
	return false
}

type countingWorker struct {
	backend.Uint8Worker
	b   *byteCounter
	per int
}

func (w countingWorker) CopyInUint8(s int, parts [][]uint8) error {
	for _, p := range parts {
		w.b.images.Add(int64(len(p) / w.per))
		if !w.b.allocated(p) {
			w.b.foreign.Add(int64(len(p) / w.per))
		}
	}
	return w.Uint8Worker.CopyInUint8(s, parts)
}

// TestUINT8GoesToTheDeviceAsBytes checks that binary UINT8 inputs (HTTP
// binary, gRPC raw, system shared memory) reach a back-end that normalises on
// the device as bytes, and that the logits are those of the images
// normalised on the host; JSON numbers and a model normalisation other than
// the server's are normalised on the host.
func TestUINT8GoesToTheDeviceAsBytes(t *testing.T) {
	ctx := context.Background()
	u8 := make([]byte, 2*3*side*side)
	for i := range u8 {
		u8[i] = byte(i * 13 % 256)
	}
	other := protocol.Normalization{Mean: []float32{0.5, 0.5, 0.5}, Std: []float32{0.5, 0.5, 0.5}}
	for _, tt := range []struct {
		name  string
		model protocol.Normalization // the front door's; the server's is ImageNet
		bytes bool                   // binary inputs go as bytes
	}{{"same normalisation", protocol.Normalization{}, true}, {"model normalisation differs", other, false}} {
		t.Run(tt.name, func(t *testing.T) {
			counter := &byteCounter{}
			f, dir := shmFixture(t, fixtureOpts{cfg: inference.Config{Backend: counter}, mcfg: protocol.ModelConfig{Normalization: tt.model}})
			require.True(t, f.srv.Uint8OnDevice())
			norm := tt.model
			if norm.IsZero() {
				norm = protocol.ImageNet
			}
			want := f.inProcess(t, hostNormalised(u8, norm.Mean, norm.Std))
			shape := []int64{2, 3, side, side}
			o := newObject(t, dir, "/u8", len(u8))
			_, err := o.f.WriteAt(u8, 0)
			require.NoError(t, err)
			setup := f.httpClient(t, false)
			require.NoError(t, setup.RegisterSystemSharedMemory(ctx, "u8", "/u8", 0, uint64(len(u8))))
			requests := map[string]*client.InferRequest{
				"inline": {Model: "resnet18", Inputs: []client.Tensor{{Name: "input", Datatype: "UINT8", Shape: shape, Data: u8}}},
				"shm": {Model: "resnet18", Inputs: []client.Tensor{{Name: "input", Datatype: "UINT8", Shape: shape,
					Region: &client.Region{Name: "u8", ByteSize: int64(len(u8))}}}},
			}
			for name, c := range f.clients(t) {
				for how, req := range requests {
					t.Run(name+"/"+how, func(t *testing.T) {
						before, foreign := counter.images.Load(), counter.foreign.Load()
						resp, err := c.Infer(ctx, req)
						require.NoError(t, err)
						assert.Equal(t, bits(want), bits(logitsOf(t, resp)))
						asBytes := tt.bytes && (name != "http-json" || how == "shm")
						assert.Equal(t, asBytes, counter.images.Load() > before, "reached the back-end as bytes")
						if how == "inline" {
							// Bytes sent inline are read into the server's own memory.
							assert.Equal(t, foreign, counter.foreign.Load(), "images in memory AllocHost did not hand out")
						}
					})
				}
			}
		})
	}
}

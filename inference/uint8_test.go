package inference_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
)

func randomImages(n, h, w int, seed uint64) []uint8 {
	rng := rand.New(rand.NewPCG(seed, 3))
	b := make([]uint8, n*3*h*w)
	for i := range b {
		b[i] = uint8(rng.IntN(256))
	}
	return b
}

func widened(b []uint8, norm inference.Normalization, h, w int) []float32 {
	f := make([]float32, len(b))
	backend.Widen(f, b, norm.Table(), h*w)
	return f
}

// TestUint8OnCPU checks that the CPU back-end, which cannot normalise on a
// device, answers a uint8 request with the logits of the same images
// normalised on the host and sent as float32.
func TestUint8OnCPU(t *testing.T) {
	custom := inference.Normalization{Mean: []float32{0.5, 0.4, 0.3}, Std: []float32{0.2, 0.3, 0.4}}
	for name, norm := range map[string]inference.Normalization{"imagenet": {}, "custom": custom} {
		t.Run(name, func(t *testing.T) {
			s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 2, Normalization: norm}, BackendName: "cpu", Model: tinyModel(t)})
			require.NoError(t, err)
			defer s.Close()
			want := norm
			if want.IsZero() {
				want = inference.ImageNet
			}
			b := randomImages(2, 32, 32, 1)
			fromBytes, err := s.Infer(context.Background(), inference.Tensor{Shape: []int{2, 3, 32, 32}, Datatype: inference.Uint8, Bytes: b})
			require.NoError(t, err)
			fromFloat, err := s.Infer(context.Background(), inference.Tensor{Shape: []int{2, 3, 32, 32}, Data: widened(b, want, 32, 32)})
			require.NoError(t, err)
			assert.Equal(t, fromFloat.Logits.Data, fromBytes.Logits.Data)
		})
	}
}

func TestUint8InputErrors(t *testing.T) {
	s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 2}, BackendName: "nop", Model: tinyModel(t)})
	require.NoError(t, err)
	defer s.Close()
	tests := []struct {
		name  string
		in    inference.Tensor
		field string
	}{
		{"bytes too short", inference.Tensor{Shape: []int{1, 3, 32, 32}, Datatype: inference.Uint8, Bytes: make([]uint8, 10)}, "data"},
		{"float data but uint8", inference.Tensor{Shape: []int{1, 3, 32, 32}, Datatype: inference.Uint8, Data: make([]float32, 3*32*32)}, "data"},
		{"unknown datatype", inference.Tensor{Shape: []int{1, 3, 32, 32}, Datatype: 7, Data: make([]float32, 3*32*32)}, "datatype"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Infer(context.Background(), tt.in)
			var ie *inference.InputError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, tt.field, ie.Field)
		})
	}
	_, err = inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, Normalization: inference.Normalization{Mean: []float32{0, 0, 0}, Std: []float32{1, 0, 1}}}, BackendName: "nop", Model: tinyModel(t)})
	assert.ErrorContains(t, err, "Normalization")
}

// uint8Nop wraps the nop back-end in workers that take uint8 input
// (backend.Uint8Worker), normalise it in "device" memory of their own with
// Options.Normalization and count the images each method received.
type uint8Nop struct{ bytes, floats atomic.Int64 }

func (u *uint8Nop) Name() string { return "uint8nop" }

func (u *uint8Nop) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	e, err := nop.New().Open(m, opts)
	if err != nil {
		return nil, err
	}
	per := 3 * opts.Height * opts.Width
	ws := e.Workers()
	for i, w := range ws {
		uw := &uint8Worker{Worker: w, u: u, per: per, plane: opts.Height * opts.Width, table: opts.Normalization.Table()}
		for range opts.Slots {
			uw.dev = append(uw.dev, make([]float32, opts.MaxBatch*per))
		}
		ws[i] = uw
	}
	return e, nil
}

type uint8Worker struct {
	backend.Worker
	u          *uint8Nop
	per, plane int
	table      [][256]float32
	dev        [][]float32 // per slot
}

func (w *uint8Worker) CopyIn(s int, parts [][]float32) error {
	for _, p := range parts {
		w.u.floats.Add(int64(len(p) / w.per))
	}
	return w.Worker.CopyIn(s, parts)
}

func (w *uint8Worker) CopyInUint8(s int, parts [][]uint8) error {
	off := 0
	for _, p := range parts {
		w.u.bytes.Add(int64(len(p) / w.per))
		backend.Widen(w.dev[s][off:off+len(p)], p, w.table, w.plane)
		off += len(p)
	}
	return w.Worker.CopyIn(s, [][]float32{w.dev[s][:off]})
}

// TestUint8ToDevice checks that a back-end with Uint8Workers receives uint8
// requests as bytes, with Config.Normalization in its options, that batches
// never mix datatypes (each request's logits are its own image's), and that
// float32 requests still arrive as float32.
func TestUint8ToDevice(t *testing.T) {
	norm := inference.Normalization{Mean: []float32{0.1, 0.2, 0.3}, Std: []float32{0.5, 0.25, 0.125}}
	for _, pipe := range []inference.Pipeline{inference.Serial, inference.Overlap} {
		t.Run(fmt.Sprint(pipe), func(t *testing.T) {
			u := &uint8Nop{}
			s, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 8, Workers: 2, Pipeline: pipe, Normalization: norm}, Backend: u, Model: tinyModel(t),
				MaxQueueDelay: 200 * time.Microsecond})
			require.NoError(t, err)
			defer s.Close()
			first := u.floats.Load() // New's first inferences
			const requests = 64
			classes := s.Classes()
			var wg sync.WaitGroup
			var uint8Images, floatImages atomic.Int64
			for i := range requests {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := 1 + i%3
					b := randomImages(n, 32, 32, uint64(i))
					f := widened(b, norm, 32, 32)
					in := inference.Tensor{Shape: []int{n, 3, 32, 32}, Data: f}
					if i%2 == 0 {
						in = inference.Tensor{Shape: []int{n, 3, 32, 32}, Datatype: inference.Uint8, Bytes: b}
						uint8Images.Add(int64(n))
					} else {
						floatImages.Add(int64(n))
					}
					resp, err := s.Infer(context.Background(), in)
					if !assert.NoError(t, err) {
						return
					}
					for j := range n { // nop: the logits are the first values of each image
						assert.Equal(t, f[j*3*32*32:j*3*32*32+classes], resp.Logits.Data[j*classes:(j+1)*classes], "request %d image %d", i, j)
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, uint8Images.Load(), u.bytes.Load(), "images received as uint8")
			assert.Equal(t, floatImages.Load(), u.floats.Load()-first, "images received as float32")
		})
	}
}

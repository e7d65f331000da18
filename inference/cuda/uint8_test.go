//go:build cuda && linux && cgo

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/half"
	"github.com/inferbench/inferbench/inference/resnet"
)

// randomBytes returns n random uint8 images of 3 x h x w.
func randomBytes(n, h, w int, seed uint64) []uint8 {
	rng := rand.New(rand.NewPCG(seed, 2))
	x := make([]uint8, n*3*h*w)
	for i := range x {
		x[i] = uint8(rng.IntN(256))
	}
	return x
}

// hostNormalised is x normalised on the host with norm (backend.Widen).
func hostNormalised(x []uint8, norm backend.Normalization, h, w int) []float32 {
	out := make([]float32, len(x))
	backend.Widen(out, x, norm.Table(), h*w)
	return out
}

// runUint8 pushes the uint8 images x (n of them) through slot 0 of worker 0
// and returns the logits.
func runUint8(t testing.TB, e backend.Engine, x []uint8, n int) []float32 {
	t.Helper()
	runBatch(t, e, n, func(w backend.Worker) error { return w.(backend.Uint8Worker).CopyInUint8(0, [][]uint8{x}) })
	return logitsOf(e, n)
}

// TestInputKernelBits checks the conversion kernels value by value: uint8
// bytes normalised on the device are bit for bit the host's table values
// (rounded to half for fp16, in the network's layout), and float32 input
// converted by the kernel is the input itself (rounded to half for fp16).
func TestInputKernelBits(t *testing.T) {
	requireGPU(t)
	useStem(t, stemPlain) // the s2d stem's kernels: TestS2DInputKernelBits
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(t, err)
	const n, h, wd = 3, 40, 36
	norm := backend.Normalization{Mean: []float32{0.5, 0.25, 0.125}, Std: []float32{0.3, 0.7, 0.11}}
	x := randomBytes(n, h, wd, 5)
	want := hostNormalised(x, norm, h, wd)
	for _, prec := range precisions {
		for _, uint8In := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/uint8=%v", prec, uint8In), func(t *testing.T) {
				e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: n, Height: h, Width: wd,
					Precision: prec, Normalization: norm})
				require.NoError(t, err)
				defer e.Close()
				eng := e.(*engine)
				w := eng.workers[0]
				if !uint8In && !eng.net.transform {
					t.Skip("fp32 NCHW networks read float input as it is: no conversion")
				}
				got := convertOnDevice(t, w, x, want, uint8In, n)
				nhwc := eng.net.transform
				mismatches := 0
				for i := range n * 3 * h * wd {
					img, c, px := i/(3*h*wd), (i/(h*wd))%3, i%(h*wd)
					src := want[i]
					at := i
					if nhwc {
						at = (img*h*wd+px)*3 + c
					}
					if !got.is(at, src) {
						mismatches++
					}
				}
				assert.Zero(t, mismatches, "values differing from the host's of %d", n*3*h*wd)
			})
		}
	}
}

// converted is the device's conversion output, as half bits or floats.
type converted struct {
	half  []uint16
	float []float32
}

// is reports whether value i is v as the network holds it: v rounded to
// half, or v's float bits.
func (c converted) is(i int, v float32) bool {
	if c.half != nil {
		return c.half[i] == half.FromFloat32(v)
	}
	return math.Float32bits(c.float[i]) == math.Float32bits(v)
}

// convertOnDevice copies x (uint8) or f (float32) into slot 0 of w, runs the
// input conversion alone and returns its output (n stem inputs).
func convertOnDevice(t *testing.T, w *worker, x []uint8, f []float32, uint8In bool, n int) converted {
	t.Helper()
	net := w.e.net
	count := n * net.stemInput()
	var out converted
	err := withContext(w.dev, func() error {
		s := &w.slots[0]
		in := inputRef{f32: s.in}
		var err error
		if uint8In {
			in.u8 = s.inU8
			err = cudadrv.MemcpyHtoD(s.inU8, unsafe.Pointer(&x[0]), len(x))
		} else {
			err = cudadrv.MemcpyHtoD(s.in, unsafe.Pointer(&f[0]), 4*len(f))
		}
		if err != nil {
			return err
		}
		p, err := w.e.plans.planFor(n, w)
		if err != nil {
			return err
		}
		dst, err := w.convertInput(p, in)
		if err != nil {
			return err
		}
		host, err := cudadrv.HostAlloc(net.elem * count)
		if err != nil {
			return err
		}
		defer cudadrv.HostFree(host)
		if err := cudadrv.MemcpyDtoHAsync(host, dst, net.elem*count, w.comp); err != nil {
			return err
		}
		if err := w.comp.Synchronize(); err != nil {
			return err
		}
		if net.elem == 2 {
			out.half = append([]uint16(nil), unsafe.Slice((*uint16)(host), count)...)
		} else {
			out.float = append([]float32(nil), unsafe.Slice((*float32)(host), count)...)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestUint8MatchesHostNormalised checks issue 16's parity bar: uint8 images
// normalised on the GPU give the logits of the same images normalised on the
// host in float32 and sent as float32 (fp32 and TF32 within 1e-5 relative,
// fp16 within the fp16 tolerance), with and without graphs, with ImageNet's
// and another normalisation.
func TestUint8MatchesHostNormalised(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 7)
	require.NoError(t, err)
	const n, h, wd = 16, 250, 250
	x := randomBytes(n, h, wd, 3)
	norms := map[string]backend.Normalization{
		"imagenet": {}, // zero: ImageNet
		"custom":   {Mean: []float32{0.5, 0.5, 0.5}, Std: []float32{0.25, 0.5, 0.125}},
	}
	for _, prec := range precisions {
		for _, graphs := range []bool{false, true} {
			for name, norm := range norms {
				t.Run(fmt.Sprintf("%s/graphs=%v/%s", prec, graphs, name), func(t *testing.T) {
					host := norm
					if host.IsZero() {
						host = backend.ImageNet
					}
					f := hostNormalised(x, host, h, wd)
					e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: n, Height: h, Width: wd,
						Precision: prec, Graphs: graphs, Batches: []int{n}, Normalization: norm})
					require.NoError(t, err)
					defer e.Close()
					fromFloat := run(t, e, [][]float32{f}, n)
					fromBytes := runUint8(t, e, x, n)
					again := run(t, e, [][]float32{f}, n) // the float path still works after a uint8 batch
					want := make([]float64, len(fromFloat))
					for i, v := range fromFloat {
						want[i] = float64(v)
					}
					rel, scale := relErr(fromBytes, want)
					relAgain, _ := relErr(again, want)
					t.Logf("uint8 normalised on the GPU vs on the host: max abs difference %.3g = %.3g x max|logit| (%.3g)", rel*scale, rel, scale)
					bound := 1e-5
					if prec == backend.FP16 {
						bound = tolerance(prec)
					}
					assert.LessOrEqual(t, rel, bound, "relative difference of the logits")
					assert.LessOrEqual(t, relAgain, bound, "float input after uint8 input")
				})
			}
		}
	}
}

// TestInputKernelMatchesTransform checks that converting float32 input with
// this package's kernel gives the logits of cudnnTransformTensor.
func TestInputKernelMatchesTransform(t *testing.T) {
	requireGPU(t)
	useStem(t, stemPlain) // cudnnTransformTensor cannot write the s2d stem's input
	m, err := resnet.New(resnet.ResNet18(), 7)
	require.NoError(t, err)
	const n = 8
	x := randomInput(n, 250, 250, 4)
	for _, prec := range []backend.Precision{backend.TF32, backend.FP16} {
		t.Run(prec.String(), func(t *testing.T) {
			logits := map[bool][]float32{}
			for _, kernel := range []bool{false, true} {
				useInputKernel = kernel
				e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: n, Height: 250, Width: 250, Precision: prec})
				useInputKernel = true
				require.NoError(t, err)
				logits[kernel] = run(t, e, [][]float32{x}, n)
				require.NoError(t, e.Close())
			}
			want := make([]float64, len(logits[false]))
			for i, v := range logits[false] {
				want[i] = float64(v)
			}
			rel, scale := relErr(logits[true], want)
			t.Logf("kernel vs cudnnTransformTensor: max abs difference %.3g = %.3g x max|logit| (%.3g)", rel*scale, rel, scale)
			assert.LessOrEqual(t, rel, 1e-5, "relative difference of the logits")
		})
	}
}

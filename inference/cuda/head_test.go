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
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
	"github.com/inferbench/inferbench/inference/internal/half"
	"github.com/inferbench/inferbench/inference/resnet"
)

// TestHeadKernels checks the classifier head's kernels against float64 on
// the host: the average pool for every precision's layout and type, and each
// fully connected kernel at batch sizes around its tiles' edges (whichever
// kernel fcKernel would pick for them).
func TestHeadKernels(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(t, err)
	const size, maxN = 64, 130 // 64x64 images: a 2x2 last stage
	rng := rand.New(rand.NewPCG(7, 11))
	for _, prec := range precisions {
		t.Run(prec.String(), func(t *testing.T) {
			e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: maxN, Height: size, Width: size, Precision: prec})
			require.NoError(t, err)
			defer e.Close()
			eng := e.(*engine)
			w, net, k := eng.workers[0], eng.net, eng.devices[0].head
			plane := net.lastH * net.lastW
			fc := eng.folded.FC
			for _, n := range []int{1, 3, 4, 5, 16, 17, 96, 97, 130} {
				// Average pool: random activations in the network's layout and type.
				x := make([]float32, n*net.feat*plane) // NCHW order
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				dev := make([]byte, n*net.feat*plane*net.elem)
				for i, v := range x {
					img, c, p := i/(net.feat*plane), (i/plane)%net.feat, i%plane
					at := i
					if net.format == cudnn.NHWC {
						at = (img*plane+p)*net.feat + c
					}
					if net.elem == 2 {
						h := half.FromFloat32(v)
						x[i] = half.ToFloat32(h) // what the device holds
						dev[2*at], dev[2*at+1] = byte(h), byte(h>>8)
					} else {
						*(*float32)(unsafe.Pointer(&dev[4*at])) = v
					}
				}
				feat := make([]float32, n*net.feat)
				require.NoError(t, withContext(w.dev, func() error {
					// On the worker's stream: a plain copy from pageable memory
					// may return before the device has the data.
					if err := cudadrv.MemcpyHtoDAsync(w.act[0], unsafe.Pointer(&dev[0]), len(dev), w.comp); err != nil {
						return err
					}
					if err := k.pool(w.comp, net, w.act[0], w.feat, n); err != nil {
						return err
					}
					if err := w.comp.Synchronize(); err != nil {
						return err
					}
					return cudadrv.MemcpyDtoH(unsafe.Pointer(&feat[0]), w.feat, 4*len(feat))
				}))
				bad := 0
				for i := range feat {
					var s float64
					for p := range plane {
						s += float64(x[i*plane+p])
					}
					if want := s / float64(plane); math.Abs(float64(feat[i])-want) > 1e-6*(1+math.Abs(want)) {
						bad++
					}
				}
				assert.Zero(t, bad, "batch %d: pooled features off float64's of %d", n, len(feat))

				// Fully connected: every kernel on the same features.
				for i := range feat {
					feat[i] = float32(rng.NormFloat64())
				}
				for i, sh := range fcShapes {
					t.Run(fmt.Sprintf("%s/batch=%d", sh.name, n), func(t *testing.T) {
						got := runFC(t, w, k, i, feat, n)
						bad := 0
						for i := range n {
							for j := range net.classes {
								want, scale := float64(fc.Bias[j]), math.Abs(float64(fc.Bias[j]))
								for c := range net.feat {
									p := float64(feat[i*net.feat+c]) * float64(fc.Weight[j*net.feat+c])
									want, scale = want+p, scale+math.Abs(p)
								}
								if math.Abs(float64(got[i*net.classes+j])-want) > 1e-5*scale {
									bad++
								}
							}
						}
						assert.Zero(t, bad, "logits off float64's (1e-5 of the sum of |terms|) of %d", n*net.classes)
					})
				}
			}
		})
	}
}

// runFC runs fully connected kernel i (of fcShapes) on n images' float
// features and returns the logits (images x classes).
func runFC(t *testing.T, w *worker, k *headKernels, i int, feat []float32, n int) []float32 {
	t.Helper()
	net := w.e.net
	out := make([]float32, n*net.classes)
	require.NoError(t, withContext(w.dev, func() error {
		if err := cudadrv.MemcpyHtoDAsync(w.feat, unsafe.Pointer(&feat[0]), 4*n*net.feat, w.comp); err != nil {
			return err
		}
		if err := k.launchFC(w.comp, i, net, w.dev, w.feat, w.slots[0].outDev, n); err != nil {
			return err
		}
		if err := w.comp.Synchronize(); err != nil {
			return err
		}
		return cudadrv.MemcpyDtoH(unsafe.Pointer(&out[0]), w.slots[0].outDev, 4*len(out))
	}))
	return out
}

//go:build cuda && linux && cgo

package cuda

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/inferbench/inferbench/inference/internal/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/cudnn"
)

//go:generate nvcc -arch=compute_80 -ptx -o head.ptx kernels/head.cu

// headPTX is the classifier head's kernels of kernels/head.cu, compiled for
// compute capability 8.0 and later.
//
//go:embed head.ptx
var headPTX []byte

// gapThreads is the threads per block of the average pool (a thread per
// image and channel).
const gapThreads = 256

// headKernels is the classifier head's module on one device, loaded in its
// context: the global average pool for the network's last activations, then
// the fully connected layer with its bias, both in float32. They replace
// cuDNN's average pool, a conversion to float, cuBLAS's product and cuDNN's
// bias addition: two launches instead of four, and no cuBLAS, whose one-time
// set-up and kernel loading cost a start about 120 ms on an H200
// (results/nvidia-h200/cold-start/).
type headKernels struct {
	mod  cudadrv.Module
	gap  cudadrv.Function // gap_<layout>_<type> of the network
	gapK string
	rows cudadrv.Function // fc_rows: a warp per class, for a few images
	// small and large tiles of images x classes for more images
	tile16, tile32 cudadrv.Function
}

// gapKernel names the average pool kernel for net's activations.
func gapKernel(net *network) string {
	layout, typ := "nchw", "f32"
	if net.format == cudnn.NHWC {
		layout = "nhwc"
	}
	if net.dataType == cudnn.Half {
		typ = "f16"
	}
	return "gap_" + layout + "_" + typ
}

// loadHeadKernels loads the head's module for net into the current context.
func loadHeadKernels(net *network) (k *headKernels, err error) {
	k = &headKernels{gapK: gapKernel(net)}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("cuda: head kernels: %w", err), k.unload())
			k = nil
		}
	}()
	if k.mod, err = cudadrv.LoadModule(headPTX); err != nil {
		return k, err
	}
	for _, f := range []struct {
		fn   *cudadrv.Function
		name string
	}{{&k.gap, k.gapK}, {&k.rows, "fc_rows"}, {&k.tile16, "fc_tile_16x32"}, {&k.tile32, "fc_tile_32x64"}} {
		if *f.fn, err = k.mod.Function(f.name); err != nil {
			return k, err
		}
	}
	return k, nil
}

// unload unloads the module (in the context it was loaded in).
func (k *headKernels) unload() error {
	if k == nil || k.mod.IsZero() {
		return nil
	}
	err := k.mod.Unload()
	k.mod = cudadrv.Module{}
	return err
}

// pool enqueues on s the average over each image's plane of n images' last
// activations at x (net's layout and type) into float features at feat
// (images x net.feat).
func (k *headKernels) pool(s cudadrv.Stream, net *network, x, feat uintptr, n int) error {
	t := n * net.feat
	b := binary.LittleEndian.AppendUint64(nil, uint64(x))
	b = binary.LittleEndian.AppendUint64(b, uint64(feat))
	for _, v := range []int{n, net.feat, net.lastH * net.lastW} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return k.gap.Launch(s, (t+gapThreads-1)/gapThreads, gapThreads, 0, b)
}

// fcLaunch is a fully connected kernel and its launch shape.
type fcLaunch struct {
	fn              cudadrv.Function
	name            string
	blocks, threads int
}

// fcKernel picks the fully connected kernel for n images of f features and
// classes classes: fc_rows up to 4 images (when f is a multiple of 32 up to
// 1024, as its lanes hold the weights of a class), tiles of 16 images x 32
// classes up to 96, of 32 x 64 beyond.
func (k *headKernels) fcKernel(n, f, classes int) fcLaunch {
	ceil := func(a, b int) int { return (a + b - 1) / b }
	switch {
	case n <= 4 && f%32 == 0 && f <= 1024:
		return fcLaunch{k.rows, "fc_rows", ceil(classes, 4), 128}
	case n <= 96:
		return fcLaunch{k.tile16, "fc_tile_16x32", ceil(n, 16) * ceil(classes, 32), 32}
	}
	return fcLaunch{k.tile32, "fc_tile_32x64", ceil(n, 32) * ceil(classes, 64), 128}
}

// classify enqueues on s the logits of n images (images x classes, float, at
// out) from their float features at feat and d's classifier weight and bias.
func (k *headKernels) classify(s cudadrv.Stream, net *network, d *device, feat, out uintptr, n int) error {
	l := k.fcKernel(n, net.feat, net.classes)
	b := make([]byte, 0, 44)
	for _, p := range []uintptr{feat, d.param(net.fcW), d.param(net.fcB), out} {
		b = binary.LittleEndian.AppendUint64(b, uint64(p))
	}
	for _, v := range []int{n, net.feat, net.classes} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return l.fn.Launch(s, l.blocks, l.threads, 0, b)
}

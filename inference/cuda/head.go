//go:build cuda && linux && cgo

package cuda

import (
	_ "embed"
	"errors"
	"fmt"

	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
)

//go:generate nvcc -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80 -o head.fatbin kernels/head.cu

// headImage is the classifier head's kernels of kernels/head.cu, a fat binary
// like normalizeImage.
//
//go:embed head.fatbin
var headImage []byte

// gapThreads is the threads per block of the average pool (a thread per
// image and channel).
const gapThreads = 256

// headKernels is the classifier head's module on one device, loaded in its
// context: the global average pool for the network's last activations, then
// the fully connected layer with its bias, both in float32. They replace
// cuDNN's average pool, a conversion to float, cuBLAS's product and cuDNN's
// bias addition: two launches instead of four, and no cuBLAS, whose one-time
// set-up and kernel loading lengthened every start.
type headKernels struct {
	mod  cudadrv.Module
	gap  cudadrv.Function // the average pool for the network
	gapK string           // its name, gap_<layout>_<type>
	fc   [len(fcShapes)]cudadrv.Function
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
	if k.mod, err = cudadrv.LoadModule(headImage); err != nil {
		return k, err
	}
	if k.gap, err = k.mod.Function(k.gapK); err != nil {
		return k, err
	}
	for i, sh := range fcShapes {
		if k.fc[i], err = k.mod.Function(sh.name); err != nil {
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
	b := kernelParams([]uintptr{x, feat}, n, net.feat, net.lastH*net.lastW)
	return k.gap.Launch(s, (t+gapThreads-1)/gapThreads, gapThreads, 0, b)
}

// classify enqueues on s the logits of n images (images x classes, float, at
// out) from their float features at feat and d's classifier weight and bias.
func (k *headKernels) classify(s cudadrv.Stream, net *network, d *device, feat, out uintptr, n int) error {
	return k.launchFC(s, fcKernel(n, net.feat), net, d, feat, out, n)
}

// launchFC enqueues fully connected kernel i (of fcShapes) on s: classify's
// choice, or a test's.
func (k *headKernels) launchFC(s cudadrv.Stream, i int, net *network, d *device, feat, out uintptr, n int) error {
	b := kernelParams([]uintptr{feat, d.param(net.fcW), d.param(net.fcB), out}, n, net.feat, net.classes)
	sh := fcShapes[i]
	return k.fc[i].Launch(s, sh.blocks(n, net.classes), sh.threads, 0, b)
}

//go:build cuda

package cuda

import (
	"errors"
	"fmt"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/cudnn"
	"github.com/inferbench/inferbench/inference/resnet"
)

// network is the device-independent execution form of a folded model: every
// parameter packed into one float32 array (uploaded once per device), the
// convolutions in execution order with their shapes and weight descriptors, and
// the shared activation and pooling descriptors.
type network struct {
	dnn    *cudnn.Lib
	params []float32
	convs  []*convLayer // stem, then per block: conv1, conv2, [down]
	blocks []blockLayers
	// Activation sizes in float32 values per image.
	stemSize, actSize, feat int
	classes                 int
	fcW, fcB                int // offsets of the classifier's weight and bias in params
	poolH, poolW            int // after the stem's max-pool
	lastH, lastW            int // before the average pool
	fcBias                  cudnn.TensorDesc
	relu, identity          cudnn.ActivationDesc
	maxPool, avgPool        cudnn.PoolingDesc
	dataType                cudnn.DataType
	math                    cudnn.MathType
}

type blockLayers struct{ conv1, conv2, down *convLayer }

// convLayer is one convolution with folded batch-norm.
type convLayer struct {
	index              int
	in, inH, inW       int
	out, outH, outW, k int
	stride, pad        int
	w, b               int // offsets in params
	relu               bool
	filter             cudnn.FilterDesc
	bias               cudnn.TensorDesc
}

// align keeps every parameter array on a 256-byte boundary.
const align = 64

func (n *network) add(v []float32) int {
	off := len(n.params)
	n.params = append(n.params, v...)
	for len(n.params)%align != 0 {
		n.params = append(n.params, 0)
	}
	return off
}

func newNetwork(dnn *cudnn.Lib, f *resnet.Folded, o backend.Options) (*network, error) {
	n := &network{dnn: dnn, classes: f.FC.Out, feat: f.FC.In, dataType: cudnn.Float, math: cudnn.FMAMath}
	if o.Precision == backend.TF32 {
		n.math = cudnn.TensorOpMath
	}
	h, w := o.Height, o.Width
	conv := func(c *resnet.FoldedConv, relu bool, inH, inW int) (*convLayer, error) {
		l := &convLayer{index: len(n.convs), in: c.In, inH: inH, inW: inW, out: c.Out, outH: c.OutSize(inH), outW: c.OutSize(inW),
			k: c.K, stride: c.Stride, pad: c.Pad, relu: relu}
		l.w, l.b = n.add(c.Weight), n.add(c.Bias)
		var err error
		if l.filter, err = dnn.NewFilter4d(n.dataType, cudnn.NCHW, c.Out, c.In, c.K, c.K); err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
		if l.bias, err = dnn.NewTensor4d(cudnn.NCHW, n.dataType, 1, c.Out, 1, 1); err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
		n.convs = append(n.convs, l)
		return l, nil
	}
	err := n.build(f, h, w, conv)
	if err != nil {
		n.destroy()
		return nil, err
	}
	return n, nil
}

func (n *network) build(f *resnet.Folded, h, w int, conv func(*resnet.FoldedConv, bool, int, int) (*convLayer, error)) error {
	stem, err := conv(&f.Stem, true, h, w)
	if err != nil {
		return err
	}
	n.stemSize = stem.out * stem.outH * stem.outW
	n.poolH, n.poolW = resnet.PoolSize(stem.outH), resnet.PoolSize(stem.outW)
	n.actSize = stem.out * n.poolH * n.poolW
	h, w = n.poolH, n.poolW
	for i := range f.Blocks {
		fb := &f.Blocks[i]
		var b blockLayers
		if b.conv1, err = conv(&fb.Conv1, true, h, w); err != nil {
			return err
		}
		if b.conv2, err = conv(&fb.Conv2, true, b.conv1.outH, b.conv1.outW); err != nil {
			return err
		}
		if fb.Down != nil {
			if b.down, err = conv(fb.Down, false, h, w); err != nil {
				return err
			}
		} else if fb.Conv1.Stride != 1 || fb.Conv1.In != fb.Conv2.Out {
			return errors.New("cuda: block without shortcut convolution changes shape")
		}
		h, w = b.conv2.outH, b.conv2.outW
		n.actSize = max(n.actSize, b.conv1.out*b.conv1.outH*b.conv1.outW, b.conv2.out*h*w)
		n.blocks = append(n.blocks, b)
	}
	n.lastH, n.lastW = h, w
	n.fcW, n.fcB = n.add(f.FC.Weight), n.add(f.FC.Bias)
	dnn := n.dnn
	if n.fcBias, err = dnn.NewTensor4d(cudnn.NCHW, n.dataType, 1, n.classes, 1, 1); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if n.relu, err = dnn.NewActivation(cudnn.ActivationReLU, cudnn.NotPropagateNaN); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if n.identity, err = dnn.NewActivation(cudnn.ActivationIdentity, cudnn.NotPropagateNaN); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if n.maxPool, err = dnn.NewPooling2d(cudnn.PoolingMax, 3, 3, 1, 1, 2, 2); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if n.avgPool, err = dnn.NewPooling2d(cudnn.PoolingAverageIncludePadding, h, w, 0, 0, h, w); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

func (n *network) destroy() {
	for _, l := range n.convs {
		l.filter.Destroy()
		l.bias.Destroy()
	}
	n.convs = nil
	n.fcBias.Destroy()
	n.relu.Destroy()
	n.identity.Destroy()
	n.maxPool.Destroy()
	n.avgPool.Destroy()
	n.fcBias, n.relu, n.identity = cudnn.TensorDesc{}, cudnn.ActivationDesc{}, cudnn.ActivationDesc{}
	n.maxPool, n.avgPool = cudnn.PoolingDesc{}, cudnn.PoolingDesc{}
}

//go:build cuda && linux && cgo

package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
	"github.com/inferbench/inferbench/inference/internal/half"
	"github.com/inferbench/inferbench/inference/resnet"
)

// network is the device-independent execution form of a folded model: every
// parameter packed into one byte array (uploaded once per device), the
// convolutions in execution order with their shapes and weight descriptors, and
// the shared activation and pooling descriptors.
type network struct {
	dnn    *cudnn.Lib
	params []byte       // convolution weights and biases in the compute type, classifier in float32
	convs  []*convLayer // stem, then per block: conv1, conv2, [down]
	blocks []blockLayers
	// Activation sizes in float32 values per image.
	stemSize, actSize, feat int
	classes                 int
	fcW, fcB                int // byte offsets of the classifier's weight and bias in params
	poolH, poolW            int // after the stem's max-pool
	lastH, lastW            int // before the average pool
	relu, identity          cudnn.ActivationDesc
	maxPool                 cudnn.PoolingDesc
	dataType                cudnn.DataType // of activations and convolution parameters
	format                  cudnn.Format   // of activations and convolution weights
	elem                    int            // bytes per activation value
	transform               bool           // the NCHW float input is converted before the stem
	stem                    stemForm       // the stem convolution's form (stem.go)
	stemPad                 int            // the plain stem's padding, which the s2d input kernel applies
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
	residual           bool // conv2 of a block: the shortcut is added before the ReLU
	filter             cudnn.FilterDesc
	bias               cudnn.TensorDesc
}

// align keeps every parameter array on a 256-byte boundary.
const align = 256

// add appends v to params, as binary16 when fp16 is set, and returns its byte
// offset. Large arrays are converted on several goroutines.
func (n *network) add(v []float32, fp16 bool) int {
	off := len(n.params)
	size := 4
	if fp16 {
		size = 2
	}
	end := off + size*len(v)
	padded := (end + align - 1) / align * align
	n.params = slices.Grow(n.params, padded-off)[:padded]
	dst := n.params[off:end]
	parallelFor(len(v), 1<<16, func(lo, hi int) {
		if fp16 {
			for i, f := range v[lo:hi] {
				binary.LittleEndian.PutUint16(dst[2*(lo+i):], half.FromFloat32(f))
			}
			return
		}
		for i, f := range v[lo:hi] {
			binary.LittleEndian.PutUint32(dst[4*(lo+i):], math.Float32bits(f))
		}
	})
	clear(n.params[end:padded])
	return off
}

// packedSize is the length params will have for f: every convolution's
// weights and bias in the compute type (binary16 when half is set), the
// classifier in float32, each array aligned.
func packedSize(f *resnet.Folded, half bool) int {
	size := 4
	if half {
		size = 2
	}
	aligned := func(n int) int { return (n + align - 1) / align * align }
	total := aligned(4*len(f.FC.Weight)) + aligned(4*len(f.FC.Bias))
	conv := func(c *resnet.FoldedConv) { total += aligned(size*len(c.Weight)) + aligned(size*len(c.Bias)) }
	conv(&f.Stem)
	for i := range f.Blocks {
		b := &f.Blocks[i]
		conv(&b.Conv1)
		conv(&b.Conv2)
		if b.Down != nil {
			conv(b.Down)
		}
	}
	return total
}

// layout returns the data type, tensor format and math type for precision p:
// FP32 keeps NCHW float without tensor cores; TF32 and FP16 use NHWC, where
// cuDNN's tensor-core kernels are fastest.
func layout(p backend.Precision) (cudnn.DataType, cudnn.Format, cudnn.MathType) {
	switch p {
	case backend.TF32:
		return cudnn.Float, cudnn.NHWC, cudnn.TensorOpMath
	case backend.FP16:
		return cudnn.Half, cudnn.NHWC, cudnn.TensorOpMath
	}
	return cudnn.Float, cudnn.NCHW, cudnn.FMAMath
}

// newNetwork builds the network of f for o with its stem in form stem, which
// must be stemPlain for an NCHW precision.
func newNetwork(dnn *cudnn.Lib, f *resnet.Folded, o backend.Options, stem stemForm) (*network, error) {
	n := &network{dnn: dnn, classes: f.FC.Out, feat: f.FC.In, stem: stem, stemPad: f.Stem.Pad}
	n.dataType, n.format, n.math = layout(o.Precision)
	n.elem = 4
	if n.dataType == cudnn.Half {
		n.elem = 2
	}
	half := n.dataType == cudnn.Half
	n.transform = n.format != cudnn.NCHW || half
	h, w := o.Height, o.Width
	conv := func(c *resnet.FoldedConv, relu bool, inH, inW int) (*convLayer, error) {
		l := &convLayer{index: len(n.convs), in: c.In, inH: inH, inW: inW, out: c.Out, outH: c.OutSize(inH), outW: c.OutSize(inW),
			k: c.K, stride: c.Stride, pad: c.Pad, relu: relu}
		wt := c.Weight
		if n.format == cudnn.NHWC {
			wt = ohwi(c)
		}
		l.w, l.b = n.add(wt, half), n.add(c.Bias, half)
		var err error
		if l.filter, err = dnn.NewFilter4d(n.dataType, n.format, c.Out, c.In, c.K, c.K); err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
		if l.bias, err = dnn.NewTensor4d(n.format, n.dataType, 1, c.Out, 1, 1); err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
		n.convs = append(n.convs, l)
		return l, nil
	}
	g := *f
	if stem == stemS2D {
		if n.format != cudnn.NHWC {
			return nil, errors.New("cuda: the space-to-depth stem needs an NHWC precision")
		}
		s, sh, sw, err := s2dStem(&f.Stem, h, w)
		if err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
		g.Stem, h, w = *s, sh, sw
	}
	n.params = make([]byte, 0, packedSize(&g, half))
	if err := n.build(&g, h, w, conv); err != nil {
		n.destroy()
		return nil, err
	}
	return n, nil
}

// build makes the layers of f, whose stem reads h x w pixels.
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
		b.conv2.residual = true
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
	n.fcW, n.fcB = n.add(f.FC.Weight, false), n.add(f.FC.Bias, false)
	dnn := n.dnn
	if n.relu, err = dnn.NewActivation(cudnn.ActivationReLU, cudnn.NotPropagateNaN); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if n.identity, err = dnn.NewActivation(cudnn.ActivationIdentity, cudnn.NotPropagateNaN); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	if n.maxPool, err = dnn.NewPooling2d(cudnn.PoolingMax, 3, 3, 1, 1, 2, 2); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

// stemInput is the values of one image's stem input: 3 x H x W, or the
// space-to-depth input's 16 x rows x cols.
func (n *network) stemInput() int {
	s := n.convs[0]
	return s.in * s.inH * s.inW
}

func (n *network) destroy() {
	for _, l := range n.convs {
		l.filter.Destroy()
		l.bias.Destroy()
	}
	n.convs = nil
	n.relu.Destroy()
	n.identity.Destroy()
	n.maxPool.Destroy()
	n.relu, n.identity, n.maxPool = cudnn.ActivationDesc{}, cudnn.ActivationDesc{}, cudnn.PoolingDesc{}
}

// Package resnet holds the ResNet family of torchvision (BasicBlock variants such as
// ResNet-18) as plain data: an architecture, weights in torchvision's layout, a
// seeded initialisation, batch-norm folding and a slow float64 reference forward
// pass that the fast back-ends are tested against.
//
// The network, for an input [n, 3, H, W]:
//
//  1. stem: 7x7 convolution, stride 2, padding 3; batch-norm; ReLU;
//     3x3 max-pool, stride 2, padding 1;
//  2. stages: for each stage s, Blocks[s] BasicBlocks of width Widths[s]; the first
//     block of every stage but the first has stride 2; a block computes
//     relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), where the shortcut is
//     x, or a 1x1 convolution and batch-norm when stride or width change;
//  3. head: global average pool, then a fully connected layer to Classes logits.
package resnet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/inferbench/inferbench/inference/internal/par"
)

// Eps is torchvision's batch-norm epsilon.
const Eps = 1e-5

// MinSize is the smallest input height or width this package accepts.
const MinSize = 32

// Arch is the shape of a BasicBlock ResNet.
type Arch struct {
	InChannels int   // input channels; 3 for images
	Stem       int   // stem convolution width; 64 in torchvision
	Widths     []int // width of each stage; 64, 128, 256, 512 in torchvision
	Blocks     []int // BasicBlocks per stage; 2, 2, 2, 2 for ResNet-18
	Classes    int   // logits; 1000 for ImageNet
}

// ResNet18 is torchvision's resnet18 architecture.
func ResNet18() Arch {
	return Arch{InChannels: 3, Stem: 64, Widths: []int{64, 128, 256, 512}, Blocks: []int{2, 2, 2, 2}, Classes: 1000}
}

// Tiny is a two-stage network of the same kind (4 and 8 channels, one block
// each, 5 classes): small enough for unit tests and CI smoke runs.
func Tiny() Arch {
	return Arch{InChannels: 3, Stem: 4, Widths: []int{4, 8}, Blocks: []int{1, 1}, Classes: 5}
}

// Name names a: "resnet18", "tiny", or its shape, such as
// "resnet(stem=8,widths=8-16,blocks=1-2,classes=10)".
func (a Arch) Name() string {
	switch {
	case a.equal(ResNet18()):
		return "resnet18"
	case a.equal(Tiny()):
		return "tiny"
	}
	join := func(v []int) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.Itoa(x)
		}
		return strings.Join(s, "-")
	}
	return fmt.Sprintf("resnet(stem=%d,widths=%s,blocks=%s,classes=%d)", a.Stem, join(a.Widths), join(a.Blocks), a.Classes)
}

func (a Arch) equal(b Arch) bool {
	return a.InChannels == b.InChannels && a.Stem == b.Stem && a.Classes == b.Classes &&
		slices.Equal(a.Widths, b.Widths) && slices.Equal(a.Blocks, b.Blocks)
}

// Validate reports whether a describes a network this package can build.
func (a Arch) Validate() error {
	switch {
	case a.InChannels < 1:
		return fmt.Errorf("resnet: InChannels = %d, want at least 1", a.InChannels)
	case a.Stem < 1:
		return fmt.Errorf("resnet: Stem = %d, want at least 1", a.Stem)
	case len(a.Widths) == 0 || len(a.Widths) != len(a.Blocks):
		return fmt.Errorf("resnet: %d widths and %d block counts, want the same non-zero number", len(a.Widths), len(a.Blocks))
	case a.Classes < 1:
		return fmt.Errorf("resnet: Classes = %d, want at least 1", a.Classes)
	}
	for i := range a.Widths {
		if a.Widths[i] < 1 || a.Blocks[i] < 1 {
			return fmt.Errorf("resnet: stage %d has width %d and %d blocks, want both at least 1", i+1, a.Widths[i], a.Blocks[i])
		}
	}
	return nil
}

// Features is the width of the last stage, the input size of the classifier.
func (a Arch) Features() int { return a.Widths[len(a.Widths)-1] }

// Conv is a convolution without bias, weights in OIHW order (torchvision's).
type Conv struct {
	Out, In, K, Stride, Pad int
	Weight                  []float32 // Out*In*K*K
}

// OutSize is the output height (or width) for an input of size h.
func (c *Conv) OutSize(h int) int { return (h+2*c.Pad-c.K)/c.Stride + 1 }

// BatchNorm is inference-mode batch normalisation: y = (x-Mean)/sqrt(Var+Eps)*Gamma + Beta.
type BatchNorm struct {
	Gamma, Beta, Mean, Var []float32
}

// Block is one BasicBlock.
type Block struct {
	Conv1 Conv
	BN1   BatchNorm
	Conv2 Conv
	BN2   BatchNorm
	// Down and DownBN form the shortcut when stride or width change; nil otherwise.
	Down   *Conv
	DownBN *BatchNorm
}

// Linear is a fully connected layer, Weight row-major [Out][In].
type Linear struct {
	Out, In int
	Weight  []float32
	Bias    []float32
}

// Model is a BasicBlock ResNet with its weights.
type Model struct {
	Arch   Arch
	Stem   Conv
	StemBN BatchNorm
	Stages [][]Block
	FC     Linear
}

// New returns a model of architecture a with torchvision's initialisation:
// convolutions from N(0, 2/fan_out), batch-norm as identity (gamma 1, beta 0,
// mean 0, var 1), the classifier's weight and bias from U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)). Each tensor, or each drawChunk values of a large one, is
// drawn from its own generator, seeded with seed and its place in the model,
// so that all CPUs draw at once (a server's start waits for the model). The
// same seed gives the same model.
func New(a Arch, seed uint64) (*Model, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var draws []func(*rand.Rand) // one per tensor or chunk, in the model's order
	conv := func(out, in, k, stride int) Conv {
		c := Conv{Out: out, In: in, K: k, Stride: stride, Pad: k / 2, Weight: make([]float32, out*in*k*k)}
		std := math.Sqrt(2 / float64(out*k*k))
		for lo := 0; lo < len(c.Weight); lo += drawChunk {
			w := c.Weight[lo:min(lo+drawChunk, len(c.Weight))]
			draws = append(draws, func(rng *rand.Rand) {
				for i := range w {
					w[i] = float32(rng.NormFloat64() * std)
				}
			})
		}
		return c
	}
	m := &Model{Arch: a}
	m.Stem = conv(a.Stem, a.InChannels, 7, 2)
	m.StemBN = identityBN(a.Stem)
	in := a.Stem
	for s, width := range a.Widths {
		var blocks []Block
		for b := 0; b < a.Blocks[s]; b++ {
			stride := 1
			if b == 0 && s > 0 {
				stride = 2
			}
			blk := Block{
				Conv1: conv(width, in, 3, stride), BN1: identityBN(width),
				Conv2: conv(width, width, 3, 1), BN2: identityBN(width),
			}
			if stride != 1 || in != width {
				d := conv(width, in, 1, stride)
				bn := identityBN(width)
				blk.Down, blk.DownBN = &d, &bn
			}
			blocks = append(blocks, blk)
			in = width
		}
		m.Stages = append(m.Stages, blocks)
	}
	bound := 1 / math.Sqrt(float64(in))
	m.FC = Linear{Out: a.Classes, In: in, Weight: make([]float32, a.Classes*in), Bias: make([]float32, a.Classes)}
	draws = append(draws, func(rng *rand.Rand) {
		for i := range m.FC.Weight {
			m.FC.Weight[i] = float32((rng.Float64()*2 - 1) * bound)
		}
		for i := range m.FC.Bias {
			m.FC.Bias[i] = float32((rng.Float64()*2 - 1) * bound)
		}
	})
	// The draws write into the weights' arrays, which the Conv values
	// above share.
	par.Do(len(draws), func(i int) {
		draws[i](rand.New(rand.NewPCG(seed, uint64(i)^0x9e3779b97f4a7c15)))
	})
	return m, nil
}

// drawChunk is the most values one generator draws: the largest tensors
// are cut so that all CPUs share them.
const drawChunk = 1 << 18

func identityBN(c int) BatchNorm {
	bn := BatchNorm{Gamma: make([]float32, c), Beta: make([]float32, c), Mean: make([]float32, c), Var: make([]float32, c)}
	for i := 0; i < c; i++ {
		bn.Gamma[i], bn.Var[i] = 1, 1
	}
	return bn
}

// Blocks returns the model's blocks in execution order.
func (m *Model) Blocks() []*Block {
	var out []*Block
	for s := range m.Stages {
		for b := range m.Stages[s] {
			out = append(out, &m.Stages[s][b])
		}
	}
	return out
}

// CheckInput reports whether an input of h x w pixels is large enough.
func CheckInput(h, w int) error {
	if h < MinSize || w < MinSize {
		return fmt.Errorf("resnet: input %dx%d, want at least %dx%d", h, w, MinSize, MinSize)
	}
	return nil
}

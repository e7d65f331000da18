package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/inferbench/inferbench/inference/resnet"
)

// LoadResNet loads the checkpoint at path and builds the ResNet it holds.
func LoadResNet(path string) (*resnet.Model, error) {
	sd, err := Load(path)
	if err != nil {
		return nil, err
	}
	m, err := ResNet(sd)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return m, nil
}

// ResNet builds a BasicBlock ResNet from a state dict with torchvision's key names:
// conv1.weight, bn1.{weight,bias,running_mean,running_var}, layerS.B.{conv1,bn1,
// conv2,bn2}.*, layerS.B.downsample.{0.weight,1.*} and fc.{weight,bias}. The
// architecture (input channels, stem width, number of stages, their widths and
// blocks, classes) is read from the tensors; strides and paddings follow
// torchvision (the first block of every stage but the first has stride 2).
//
// A state dict nested under "state_dict" (as training scripts save it) is used
// when present, and a "module." prefix (DataParallel) is removed. The
// num_batches_tracked counters are ignored. The model's weights share memory with
// sd's tensors. Errors name missing, unexpected and mis-shaped keys, with both
// shapes.
func ResNet(sd map[string]Tensor) (*resnet.Model, error) {
	sd = normalizeKeys(sd)
	b := &builder{sd: sd, used: make(map[string]bool)}
	arch, err := b.arch()
	if err != nil {
		return nil, err
	}
	m := &resnet.Model{Arch: arch}
	m.Stem = b.conv("conv1", arch.Stem, arch.InChannels, 7, 2)
	m.StemBN = b.bn("bn1", arch.Stem)
	in := arch.Stem
	for s, width := range arch.Widths {
		var blocks []resnet.Block
		for i := 0; i < arch.Blocks[s]; i++ {
			p := fmt.Sprintf("layer%d.%d.", s+1, i)
			stride := 1
			if i == 0 && s > 0 {
				stride = 2
			}
			blk := resnet.Block{
				Conv1: b.conv(p+"conv1", width, in, 3, stride), BN1: b.bn(p+"bn1", width),
				Conv2: b.conv(p+"conv2", width, width, 3, 1), BN2: b.bn(p+"bn2", width),
			}
			if stride != 1 || in != width {
				d := b.conv(p+"downsample.0", width, in, 1, stride)
				bn := b.bn(p+"downsample.1", width)
				blk.Down, blk.DownBN = &d, &bn
			}
			blocks = append(blocks, blk)
			in = width
		}
		m.Stages = append(m.Stages, blocks)
	}
	m.FC = resnet.Linear{
		Out: arch.Classes, In: in,
		Weight: b.tensor("fc.weight", arch.Classes, in),
		Bias:   b.tensor("fc.bias", arch.Classes),
	}
	var unexpected []string
	for k := range sd {
		if !b.used[k] && !strings.HasSuffix(k, "num_batches_tracked") {
			unexpected = append(unexpected, k)
		}
	}
	if len(b.missing) > 0 {
		b.errs = append([]error{fmt.Errorf("%w: %s", ErrMissingKey, keyList(b.missing))}, b.errs...)
	}
	if len(unexpected) > 0 {
		b.errs = append(b.errs, fmt.Errorf("%w: %s", ErrUnexpectedKey, keyList(unexpected)))
	}
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}
	return m, nil
}

// normalizeKeys returns the state dict nested under "state_dict" (or "model"), if
// any, without DataParallel's "module." prefix.
func normalizeKeys(sd map[string]Tensor) map[string]Tensor {
	for _, nest := range []string{"state_dict.", "model."} {
		inner := make(map[string]Tensor)
		for k, t := range sd {
			if rest, ok := strings.CutPrefix(k, nest); ok {
				inner[rest] = t
			}
		}
		if _, ok := inner["module.conv1.weight"]; ok {
			sd = inner
			break
		}
		if _, ok := inner["conv1.weight"]; ok {
			sd = inner
			break
		}
	}
	if _, ok := sd["conv1.weight"]; ok {
		return sd
	}
	if _, ok := sd["module.conv1.weight"]; !ok {
		return sd
	}
	// Keys without the prefix stay, and are reported as unexpected.
	stripped := make(map[string]Tensor, len(sd))
	for k, t := range sd {
		stripped[strings.TrimPrefix(k, "module.")] = t
	}
	return stripped
}

type builder struct {
	sd      map[string]Tensor
	used    map[string]bool
	missing []string // keys with their wanted shapes
	errs    []error
}

// arch reads the architecture from the defining tensors' shapes.
func (b *builder) arch() (resnet.Arch, error) {
	var a resnet.Arch
	stem, ok := b.sd["conv1.weight"]
	if !ok {
		return a, fmt.Errorf("%w: conv1.weight (the stem convolution)", ErrMissingKey)
	}
	if len(stem.Shape) != 4 || stem.Shape[2] != 7 || stem.Shape[3] != 7 {
		return a, fmt.Errorf("%w: conv1.weight has shape %v, want [stem in 7 7]", ErrShape, stem.Shape)
	}
	a.Stem, a.InChannels = stem.Shape[0], stem.Shape[1]
	for s := 1; ; s++ {
		key := fmt.Sprintf("layer%d.0.conv1.weight", s)
		w, ok := b.sd[key]
		if !ok {
			break
		}
		if len(w.Shape) != 4 {
			return a, fmt.Errorf("%w: %s has shape %v, want [width in 3 3]", ErrShape, key, w.Shape)
		}
		blocks := 0
		for b.has(fmt.Sprintf("layer%d.%d.", s, blocks)) {
			blocks++
		}
		a.Widths = append(a.Widths, w.Shape[0])
		a.Blocks = append(a.Blocks, blocks)
	}
	if len(a.Widths) == 0 {
		return a, fmt.Errorf("%w: layer1.0.conv1.weight (no stages)", ErrMissingKey)
	}
	fc, ok := b.sd["fc.weight"]
	if !ok {
		return a, fmt.Errorf("%w: fc.weight (the classifier)", ErrMissingKey)
	}
	if len(fc.Shape) != 2 {
		return a, fmt.Errorf("%w: fc.weight has shape %v, want [classes %d]", ErrShape, fc.Shape, a.Widths[len(a.Widths)-1])
	}
	a.Classes = fc.Shape[0]
	if err := a.Validate(); err != nil {
		return a, fmt.Errorf("%w: %v", ErrShape, err)
	}
	return a, nil
}

// has reports whether any key starts with prefix.
func (b *builder) has(prefix string) bool {
	for k := range b.sd {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// tensor returns the data of key, which must have the given shape.
func (b *builder) tensor(key string, shape ...int) []float32 {
	t, ok := b.sd[key]
	if !ok {
		b.missing = append(b.missing, fmt.Sprintf("%s %v", key, shape))
		return nil
	}
	b.used[key] = true
	if !slices.Equal(t.Shape, shape) || len(t.Data) != product(shape) {
		if len(b.errs) < 10 {
			b.errs = append(b.errs, fmt.Errorf("%w: %s has shape %v (%d values), want %v", ErrShape, key, t.Shape, len(t.Data), shape))
		}
		return nil
	}
	return t.Data
}

func (b *builder) conv(name string, out, in, k, stride int) resnet.Conv {
	return resnet.Conv{Out: out, In: in, K: k, Stride: stride, Pad: k / 2, Weight: b.tensor(name+".weight", out, in, k, k)}
}

func (b *builder) bn(name string, c int) resnet.BatchNorm {
	return resnet.BatchNorm{
		Gamma: b.tensor(name+".weight", c), Beta: b.tensor(name+".bias", c),
		Mean: b.tensor(name+".running_mean", c), Var: b.tensor(name+".running_var", c),
	}
}

func product(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// keyList formats keys sorted, at most ten of them.
func keyList(keys []string) string {
	slices.Sort(keys)
	if len(keys) > 10 {
		return strings.Join(keys[:10], ", ") + " and " + strconv.Itoa(len(keys)-10) + " more"
	}
	return strings.Join(keys, ", ")
}

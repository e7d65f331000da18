package checkpoint

import (
	"bytes"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/resnet"
)

// stateDict is the inverse of ResNet: m's tensors under torchvision's names.
func stateDict(m *resnet.Model) map[string]Tensor {
	sd := make(map[string]Tensor)
	conv := func(name string, c *resnet.Conv) {
		sd[name+".weight"] = Tensor{Shape: []int{c.Out, c.In, c.K, c.K}, Data: c.Weight, DType: F32}
	}
	bn := func(name string, b *resnet.BatchNorm) {
		c := len(b.Gamma)
		for suffix, v := range map[string][]float32{"weight": b.Gamma, "bias": b.Beta, "running_mean": b.Mean, "running_var": b.Var} {
			sd[name+"."+suffix] = Tensor{Shape: []int{c}, Data: v, DType: F32}
		}
		sd[name+".num_batches_tracked"] = Tensor{Shape: []int{}, Data: []float32{7}, DType: I64}
	}
	conv("conv1", &m.Stem)
	bn("bn1", &m.StemBN)
	for s, blocks := range m.Stages {
		for i := range blocks {
			b := &blocks[i]
			p := fmt.Sprintf("layer%d.%d.", s+1, i)
			conv(p+"conv1", &b.Conv1)
			bn(p+"bn1", &b.BN1)
			conv(p+"conv2", &b.Conv2)
			bn(p+"bn2", &b.BN2)
			if b.Down != nil {
				conv(p+"downsample.0", b.Down)
				bn(p+"downsample.1", b.DownBN)
			}
		}
	}
	sd["fc.weight"] = Tensor{Shape: []int{m.FC.Out, m.FC.In}, Data: m.FC.Weight, DType: F32}
	sd["fc.bias"] = Tensor{Shape: []int{m.FC.Out}, Data: m.FC.Bias, DType: F32}
	return sd
}

// TestResNetRoundTrip writes models of many shapes as safetensors and reads them back.
func TestResNetRoundTrip(t *testing.T) {
	archs := []resnet.Arch{
		{InChannels: 3, Stem: 16, Widths: []int{16, 32, 64, 128}, Blocks: []int{2, 2, 2, 2}, Classes: 100},
		{InChannels: 1, Stem: 4, Widths: []int{4}, Blocks: []int{1}, Classes: 2},
		{InChannels: 3, Stem: 8, Widths: []int{6, 12, 10}, Blocks: []int{3, 1, 2}, Classes: 9},
		{InChannels: 4, Stem: 5, Widths: []int{5, 5, 5, 5, 5}, Blocks: []int{1, 1, 1, 1, 1}, Classes: 1},
	}
	for _, a := range archs {
		t.Run(fmt.Sprintf("stem=%d/widths=%v/blocks=%v", a.Stem, a.Widths, a.Blocks), func(t *testing.T) {
			m, err := resnet.New(a, 3)
			require.NoError(t, err)
			var buf bytes.Buffer
			require.NoError(t, WriteSafetensors(&buf, stateDict(m)))
			sd, err := read(buf.Bytes())
			require.NoError(t, err)
			got, err := ResNet(sd)
			require.NoError(t, err)
			assert.Equal(t, m, got)
		})
	}
}

func TestResNetErrors(t *testing.T) {
	base, err := resnet.New(resnet.Arch{InChannels: 3, Stem: 8, Widths: []int{8, 16}, Blocks: []int{2, 1}, Classes: 5}, 1)
	require.NoError(t, err)
	tests := []struct {
		name string
		edit func(sd map[string]Tensor) map[string]Tensor
		want error
		msg  string
	}{
		{"missing key", func(sd map[string]Tensor) map[string]Tensor {
			delete(sd, "layer1.1.bn2.running_var")
			return sd
		}, ErrMissingKey, "layer1.1.bn2.running_var [8]"},
		{"missing downsample", func(sd map[string]Tensor) map[string]Tensor {
			delete(sd, "layer2.0.downsample.0.weight")
			return sd
		}, ErrMissingKey, "layer2.0.downsample.0.weight [16 8 1 1]"},
		{"missing stem", func(sd map[string]Tensor) map[string]Tensor {
			delete(sd, "conv1.weight")
			return sd
		}, ErrMissingKey, "conv1.weight"},
		{"missing classifier", func(sd map[string]Tensor) map[string]Tensor {
			delete(sd, "fc.weight")
			return sd
		}, ErrMissingKey, "fc.weight"},
		{"no stages", func(sd map[string]Tensor) map[string]Tensor {
			maps.DeleteFunc(sd, func(k string, _ Tensor) bool { return strings.HasPrefix(k, "layer") })
			return sd
		}, ErrMissingKey, "layer1.0.conv1.weight"},
		{"unexpected key", func(sd map[string]Tensor) map[string]Tensor {
			sd["layer1.0.se.weight"] = Tensor{Shape: []int{1}, Data: []float32{1}}
			return sd
		}, ErrUnexpectedKey, "layer1.0.se.weight"},
		{"gap in blocks", func(sd map[string]Tensor) map[string]Tensor {
			sd["layer1.3.conv1.weight"] = sd["layer1.1.conv1.weight"]
			return sd
		}, ErrUnexpectedKey, "layer1.3.conv1.weight"},
		{"mis-shaped bias", func(sd map[string]Tensor) map[string]Tensor {
			sd["fc.bias"] = Tensor{Shape: []int{6}, Data: make([]float32, 6)}
			return sd
		}, ErrShape, "fc.bias has shape [6] (6 values), want [5]"},
		{"mis-shaped conv", func(sd map[string]Tensor) map[string]Tensor {
			sd["layer1.0.conv2.weight"] = Tensor{Shape: []int{8, 8, 1, 1}, Data: make([]float32, 64)}
			return sd
		}, ErrShape, "layer1.0.conv2.weight has shape [8 8 1 1] (64 values), want [8 8 3 3]"},
		{"stem kernel", func(sd map[string]Tensor) map[string]Tensor {
			sd["conv1.weight"] = Tensor{Shape: []int{8, 3, 3, 3}, Data: make([]float32, 8*27)}
			return sd
		}, ErrShape, "conv1.weight has shape [8 3 3 3], want [stem in 7 7]"},
		{"data shorter than shape", func(sd map[string]Tensor) map[string]Tensor {
			sd["bn1.weight"] = Tensor{Shape: []int{8}, Data: make([]float32, 7)}
			return sd
		}, ErrShape, "bn1.weight has shape [8] (7 values), want [8]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ResNet(tt.edit(stateDict(base)))
			require.Error(t, err)
			assert.Nil(t, m)
			assert.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

func TestResNetPrefixes(t *testing.T) {
	base, err := resnet.New(resnet.Arch{InChannels: 3, Stem: 4, Widths: []int{4, 8}, Blocks: []int{1, 1}, Classes: 3}, 2)
	require.NoError(t, err)
	prefixed := func(p string) map[string]Tensor {
		sd := make(map[string]Tensor)
		for k, v := range stateDict(base) {
			sd[p+k] = v
		}
		return sd
	}
	for _, p := range []string{"", "module.", "state_dict.", "state_dict.module.", "model."} {
		t.Run("prefix="+p, func(t *testing.T) {
			sd := prefixed(p)
			if strings.Contains(p, "state_dict.") || p == "model." {
				sd["epoch"] = Tensor{Shape: []int{}, Data: []float32{3}} // training scripts' extras
			}
			m, err := ResNet(sd)
			require.NoError(t, err)
			assert.Equal(t, base, m)
		})
	}
}

func TestWriteSafetensorsErrors(t *testing.T) {
	var buf bytes.Buffer
	err := WriteSafetensors(&buf, map[string]Tensor{"a": {Shape: []int{2}, Data: []float32{1}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "checkpoint: tensor a has 1 values for shape [2]")
	err = WriteSafetensors(&buf, map[string]Tensor{"__metadata__": {Shape: []int{1}, Data: []float32{1}}})
	assert.ErrorContains(t, err, "reserved")
}

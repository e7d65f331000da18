package checkpoint_test

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/checkpoint"
	"github.com/inferbench/inferbench/inference/resnet"
	"github.com/inferbench/inferbench/inference/resnet/testref"
)

// fullDir is where scripts/make_reference.py --full DIR wrote the full-size
// ResNet-18 case (resnet18.pth, its input and float64 logits); tests that need it
// skip when REF_FULL is unset.
func fullDir(tb testing.TB) string {
	dir := os.Getenv("REF_FULL")
	if dir == "" {
		tb.Skip("REF_FULL not set: the full-size ResNet-18 case comes from scripts/make_reference.py --full DIR (47 MB, not in the repository)")
	}
	return dir
}

func maxAbsError(got, want []float64) (maxErr, scale float64) {
	for i := range got {
		maxErr = max(maxErr, math.Abs(got[i]-want[i]))
		scale = max(scale, math.Abs(want[i]))
	}
	return maxErr, scale
}

// TestReferenceCases checks the loaded reference models against PyTorch's float64
// logits through resnet's float64 forward pass.
func TestReferenceCases(t *testing.T) {
	cases, err := testref.Load("../../testdata/reference")
	require.NoError(t, err)
	for _, c := range cases {
		got, err := c.Model.Reference(c.Input, c.N, c.H, c.W)
		require.NoError(t, err)
		maxErr, scale := maxAbsError(got, c.Logits)
		assert.LessOrEqual(t, maxErr, 1e-4*scale, "case %s: max abs error", c.Name)
	}
}

// TestFullReference loads the full-size torchvision ResNet-18 saved by torch.save,
// times Load, and compares Reference with PyTorch's float64 logits.
func TestFullReference(t *testing.T) {
	dir := fullDir(t)
	path := filepath.Join(dir, "resnet18.pth")
	st, err := os.Stat(path)
	require.NoError(t, err)
	var times []time.Duration
	for range 20 {
		start := time.Now()
		sd, err := checkpoint.Load(path)
		times = append(times, time.Since(start))
		require.NoError(t, err)
		require.Len(t, sd, 122)
	}
	first := times[0]
	slices.Sort(times)
	t.Logf("checkpoint.Load(%s, %d B): first %.1f ms, min %.1f ms, median %.1f ms over %d",
		filepath.Base(path), st.Size(), ms(first), ms(times[0]), ms(times[len(times)/2]), len(times))

	start := time.Now()
	cases, err := testref.Load(dir)
	require.NoError(t, err)
	require.Len(t, cases, 1)
	c := cases[0]
	assert.Equal(t, resnet.ResNet18(), c.Model.Arch)
	t.Logf("testref.Load: %.1f ms", ms(time.Since(start)))
	start = time.Now()
	got, err := c.Model.Reference(c.Input, c.N, c.H, c.W)
	require.NoError(t, err)
	maxErr, scale := maxAbsError(got, c.Logits)
	t.Logf("ResNet-18 %dx3x%dx%d: Reference in %.1f s, max abs error %.3g, max |logit| %.4g, relative %.3g",
		c.N, c.H, c.W, time.Since(start).Seconds(), maxErr, scale, maxErr/scale)
	assert.LessOrEqual(t, maxErr, 1e-4*scale, "Reference max abs error")
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// BenchmarkLoad measures Load of a full-size ResNet-18: format=zip is torch.save's
// file (REF_FULL), format=safetensors one written by WriteSafetensors.
func BenchmarkLoad(b *testing.B) {
	b.Run("format=zip", func(b *testing.B) {
		benchLoad(b, filepath.Join(fullDir(b), "resnet18.pth"))
	})
	b.Run("format=safetensors", func(b *testing.B) {
		m, err := resnet.New(resnet.ResNet18(), 1)
		require.NoError(b, err)
		path := filepath.Join(b.TempDir(), "resnet18.safetensors")
		f, err := os.Create(path)
		require.NoError(b, err)
		require.NoError(b, checkpoint.WriteSafetensors(f, stateDict(m)))
		require.NoError(b, f.Close())
		benchLoad(b, path)
	})
}

func benchLoad(b *testing.B, path string) {
	st, err := os.Stat(path)
	require.NoError(b, err)
	b.SetBytes(st.Size())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := checkpoint.LoadResNet(path); err != nil {
			b.Fatal(err)
		}
	}
}

// stateDict lists m's tensors under torchvision's names (weights only; enough for
// a benchmark file).
func stateDict(m *resnet.Model) map[string]checkpoint.Tensor {
	sd := make(map[string]checkpoint.Tensor)
	add := func(name string, shape []int, data []float32) {
		sd[name] = checkpoint.Tensor{Shape: shape, Data: data, DType: checkpoint.F32}
	}
	conv := func(name string, c *resnet.Conv) { add(name+".weight", []int{c.Out, c.In, c.K, c.K}, c.Weight) }
	bn := func(name string, n *resnet.BatchNorm) {
		c := len(n.Gamma)
		add(name+".weight", []int{c}, n.Gamma)
		add(name+".bias", []int{c}, n.Beta)
		add(name+".running_mean", []int{c}, n.Mean)
		add(name+".running_var", []int{c}, n.Var)
	}
	conv("conv1", &m.Stem)
	bn("bn1", &m.StemBN)
	for s, blocks := range m.Stages {
		for i := range blocks {
			blk := &blocks[i]
			p := "layer" + string(rune('1'+s)) + "." + string(rune('0'+i)) + "."
			conv(p+"conv1", &blk.Conv1)
			bn(p+"bn1", &blk.BN1)
			conv(p+"conv2", &blk.Conv2)
			bn(p+"bn2", &blk.BN2)
			if blk.Down != nil {
				conv(p+"downsample.0", blk.Down)
				bn(p+"downsample.1", blk.DownBN)
			}
		}
	}
	add("fc.weight", []int{m.FC.Out, m.FC.In}, m.FC.Weight)
	add("fc.bias", []int{m.FC.Out}, m.FC.Bias)
	return sd
}

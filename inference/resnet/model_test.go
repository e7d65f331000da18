package resnet

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var small = Arch{InChannels: 3, Stem: 4, Widths: []int{4, 8}, Blocks: []int{1, 2}, Classes: 3}

func TestNewIsSeeded(t *testing.T) {
	a, err := New(small, 7)
	require.NoError(t, err)
	b, err := New(small, 7)
	require.NoError(t, err)
	c, err := New(small, 8)
	require.NoError(t, err)
	assert.Equal(t, a, b, "same seed, same model")
	assert.NotEqual(t, a.Stem.Weight, c.Stem.Weight, "another seed, other weights")
}

func TestResNet18Shape(t *testing.T) {
	m, err := New(ResNet18(), 1)
	require.NoError(t, err)
	var params int
	add := func(c *Conv) { params += len(c.Weight) }
	add(&m.Stem)
	downs := 0
	for _, b := range m.Blocks() {
		add(&b.Conv1)
		add(&b.Conv2)
		if b.Down != nil {
			add(b.Down)
			downs++
		}
	}
	params += len(m.FC.Weight) + len(m.FC.Bias)
	assert.Len(t, m.Blocks(), 8)
	assert.Equal(t, 3, downs, "stages 2-4 start with a downsampling block")
	// torchvision's resnet18 has 11,689,512 parameters, 9,600 of them in
	// batch-norm (weight and bias of 4,800 channels).
	assert.Equal(t, 11_689_512-9_600, params)
	// Kaiming normal, fan_out: the stem's std is sqrt(2/(64*7*7)).
	var sum, sq float64
	for _, v := range m.Stem.Weight {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	n := float64(len(m.Stem.Weight))
	std := math.Sqrt(sq/n - (sum/n)*(sum/n))
	assert.InDelta(t, math.Sqrt(2.0/(64*49)), std, 0.003)
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		arch Arch
		want string
	}{
		{"no stages", Arch{InChannels: 3, Stem: 4, Classes: 2}, "0 widths and 0 block counts"},
		{"mismatch", Arch{InChannels: 3, Stem: 4, Widths: []int{4}, Blocks: []int{1, 1}, Classes: 2}, "1 widths and 2 block counts"},
		{"no classes", Arch{InChannels: 3, Stem: 4, Widths: []int{4}, Blocks: []int{1}}, "Classes = 0"},
		{"empty stage", Arch{InChannels: 3, Stem: 4, Widths: []int{4}, Blocks: []int{0}, Classes: 2}, "stage 1 has width 4 and 0 blocks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.arch, 1)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestTiny(t *testing.T) {
	m, err := New(Tiny(), 1)
	require.NoError(t, err)
	assert.Len(t, m.Blocks(), 2)
	assert.Len(t, m.Stem.Weight, 4*3*7*7)
	assert.Len(t, m.FC.Weight, 5*8, "5 classes from the last stage's 8 channels")
}

func TestArchName(t *testing.T) {
	assert.Equal(t, "resnet18", ResNet18().Name())
	assert.Equal(t, "tiny", Tiny().Name())
	a := Arch{InChannels: 3, Stem: 8, Widths: []int{8, 16}, Blocks: []int{1, 2}, Classes: 10}
	assert.Equal(t, "resnet(stem=8,widths=8-16,blocks=1-2,classes=10)", a.Name())
}

func TestFoldScalesByBatchNorm(t *testing.T) {
	m, err := New(small, 3)
	require.NoError(t, err)
	bn := &m.StemBN
	bn.Gamma[1], bn.Beta[1], bn.Mean[1], bn.Var[1] = 2, 0.5, 0.25, 3
	f := m.Fold()
	per := m.Stem.In * m.Stem.K * m.Stem.K
	scale := 2 / math.Sqrt(3+Eps)
	for i := per; i < 2*per; i++ {
		assert.InDelta(t, float64(m.Stem.Weight[i])*scale, float64(f.Stem.Weight[i]), 1e-6)
	}
	assert.InDelta(t, 0.5-0.25*scale, float64(f.Stem.Bias[1]), 1e-6)
	assert.InDelta(t, 0, float64(f.Stem.Bias[0]), 1e-9, "identity batch-norm adds no bias")
}

func TestReferenceChecksInput(t *testing.T) {
	m, err := New(small, 1)
	require.NoError(t, err)
	_, err = m.Reference(make([]float32, 10), 1, 32, 32)
	assert.ErrorContains(t, err, "10 values for 1 images")
	_, err = m.Reference(make([]float32, 3*16*16), 1, 16, 16)
	assert.ErrorContains(t, err, "want at least 32x32")
	out, err := m.Reference(make([]float32, 2*3*32*33), 2, 32, 33)
	require.NoError(t, err)
	assert.Len(t, out, 2*3)
}

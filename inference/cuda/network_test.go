//go:build cuda && linux && cgo

package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/resnet"
)

// TestPackedSize checks that packedSize is the length add gives params for
// a model, so that packing allocates once, in both precisions.
func TestPackedSize(t *testing.T) {
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(t, err)
	f := m.Fold()
	convs := []*resnet.FoldedConv{&f.Stem}
	for i := range f.Blocks {
		b := &f.Blocks[i]
		convs = append(convs, &b.Conv1, &b.Conv2)
		if b.Down != nil {
			convs = append(convs, b.Down)
		}
	}
	for _, half := range []bool{false, true} {
		n := &network{params: make([]byte, 0, packedSize(f, half))}
		for _, c := range convs {
			n.add(ohwi(c), half)
			n.add(c.Bias, half)
		}
		n.add(f.FC.Weight, false)
		n.add(f.FC.Bias, false)
		assert.Equal(t, len(n.params), packedSize(f, half), "half=%v", half)
		assert.Equal(t, cap(n.params), packedSize(f, half), "half=%v: params grew", half)
	}
}

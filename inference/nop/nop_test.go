package nop

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

func TestRegistered(t *testing.T) {
	b, err := backend.Lookup("nop")
	require.NoError(t, err)
	assert.Equal(t, "nop", b.Name())
}

func TestOpenRejectsOversizedOptions(t *testing.T) {
	m, err := resnet.New(resnet.Tiny(), 1)
	require.NoError(t, err)
	ok := backend.Options{Workers: 1, Slots: 1, MaxBatch: 2, Height: 32, Width: 32}
	tests := []struct {
		name string
		edit func(*backend.Options)
		want string
	}{
		{"huge image", func(o *backend.Options) { o.Height, o.Width = 1<<31, 1<<31 },
			"nop: an image of 3 x 2147483648 x 2147483648 values is too large"},
		{"huge batch", func(o *backend.Options) { o.MaxBatch = 1 << 62 },
			"nop: MaxBatch 4611686018427387904 x 5 classes of logits is too large"},
		{"zero height", func(o *backend.Options) { o.Height = 0 },
			"nop: Workers, Slots, MaxBatch, Height and Width must be at least 1, got 1, 1, 2, 0, 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := ok
			tt.edit(&opts)
			_, err := New().Open(m, opts)
			assert.EqualError(t, err, tt.want)
		})
	}
	_, err = New().Open(m, ok)
	assert.NoError(t, err)
}

package cuda

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFCShapes checks what kernels/head.cu assumes of each launch: a warp a
// class for fc_rows; for a tile, a thread for every 4 x 4 outputs and a whole
// number of float4 loads per thread for both operands (the kernel divides,
// and a remainder would go unloaded).
func TestFCShapes(t *testing.T) {
	for _, s := range fcShapes {
		if s.ti == 0 {
			assert.Equal(t, s.tj*32, s.threads, "%s: a warp per class", s.name)
			continue
		}
		assert.Equal(t, s.ti*s.tj/16, s.threads, "%s: a thread per 4 x 4 outputs", s.name)
		for _, rows := range []int{s.ti, s.tj} {
			assert.Zero(t, rows*fcChunk/4%s.threads, "%s: float4 loads of %d rows x %d k over %d threads", s.name, rows, fcChunk, s.threads)
		}
		assert.Equal(t, fmt.Sprintf("fc_tile_%dx%d", s.ti, s.tj), s.name)
		// 64 images x 100 classes: 4 x 4 tiles of 16 x 32, 2 x 2 of 32 x 64.
		assert.Equal(t, map[int]int{16: 16, 32: 4}[s.ti], s.blocks(64, 100), "%s: 64 images x 100 classes", s.name)
	}
	assert.Equal(t, 250, fcShapes[0].blocks(7, 1000), "fc_rows: 4 classes a block, any images")
}

func TestFCKernel(t *testing.T) {
	tests := []struct {
		n, f int
		want string
	}{
		{1, 512, "fc_rows"},
		{4, 512, "fc_rows"},
		{5, 512, "fc_tile_16x32"},
		{2, 14, "fc_tile_16x32"},   // rows need f a multiple of 32
		{1, 2048, "fc_tile_16x32"}, // and at most 1024 (32 a lane)
		{96, 512, "fc_tile_16x32"},
		{97, 512, "fc_tile_32x64"},
		{256, 512, "fc_tile_32x64"},
	}
	for _, tt := range tests {
		got := fcShapes[fcKernel(tt.n, tt.f)].name
		assert.Equal(t, tt.want, got, "fcKernel(%d, %d)", tt.n, tt.f)
	}
}

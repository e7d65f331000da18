package cuda

// The fully connected kernels' shapes and choice, apart from the cuda build
// so that their arithmetic is tested everywhere.

// fcShape is a fully connected kernel: fc_rows (ti 0), a warp per class, or
// fc_tile_<ti>x<tj>, a block per tile of ti images x tj classes.
type fcShape struct {
	name            string
	ti, tj, threads int
}

// fcChunk is TK of kernels/head.cu: the k values a tile stages at a time, as
// float4s shared out among the block's threads.
const fcChunk = 32

// fcShapes are the fully connected kernels, as fcKernel picks them.
var fcShapes = [...]fcShape{{"fc_rows", 0, 4, 128}, {"fc_tile_16x32", 16, 32, 32}, {"fc_tile_32x64", 32, 64, 128}}

// blocks is the grid of a launch for n images of classes classes.
func (s fcShape) blocks(n, classes int) int {
	ceil := func(a, b int) int { return (a + b - 1) / b }
	if s.ti == 0 {
		return ceil(classes, s.tj)
	}
	return ceil(n, s.ti) * ceil(classes, s.tj)
}

// fcKernel picks the fully connected kernel (an index of fcShapes) for n
// images of f features: fc_rows up to 4 images (when f is a multiple of 32 up
// to 1024, as its lanes hold the weights of a class), tiles of 16 images x 32
// classes up to 96, of 32 x 64 beyond.
func fcKernel(n, f int) int {
	switch {
	case n <= 4 && f%32 == 0 && f <= 1024:
		return 0
	case n <= 96:
		return 1
	}
	return 2
}

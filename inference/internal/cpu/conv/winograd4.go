package conv

// Winograd's F(4x4, 3x3): each 4x4 block of outputs is computed from the
// 6x6 block of input around it, 36 multiplications per input channel
// instead of 144, with
//
//	Bᵀ = [4  0 -5  0 1 0]   G = [ 1/4     0    0 ]   Aᵀ = [1 1  1 1  1 0]
//	     [0 -4 -4  1 1 0]       [-1/6 -1/6 -1/6]         [0 1 -1 2 -2 0]
//	     [0  4 -4 -1 1 0]       [-1/6  1/6 -1/6]         [0 1  1 4  4 0]
//	     [0 -2 -1  2 1 0]       [1/24 1/12  1/6]         [0 1 -1 8 -8 1]
//	     [0  2 -1 -2 1 0]       [1/24 -1/12 1/6]
//	     [0  4  0 -5 0 1]       [   0    0    1]
//
// The transforms multiply by 4, 5 and 8 as well as add, so rounding is
// further from the direct convolution's than F(2x2, 3x3)'s: TestLayer
// and the ResNet-18 parity test bound it. The Go transforms below are the
// reference the assembly matches to the bit: the same operations in the same
// order, every product rounded to float32 before it is added (no fused
// multiply-adds).

// winograd4Weights sets u to G g Gᵀ for the 3x3 kernel g (row-major), in
// float64.
func winograd4Weights(u *[36]float64, g []float32) {
	gm := func(a, b, c float64) [6]float64 {
		return [6]float64{a / 4, -(a + b + c) / 6, -(a - b + c) / 6, a/24 + b/12 + c/6, a/24 - b/12 + c/6, c}
	}
	var t [6][3]float64 // G g
	for j := 0; j < 3; j++ {
		col := gm(float64(g[j]), float64(g[3+j]), float64(g[6+j]))
		for i := range col {
			t[i][j] = col[i]
		}
	}
	for i := 0; i < 6; i++ { // (G g) Gᵀ
		row := gm(t[i][0], t[i][1], t[i][2])
		copy(u[i*6:][:6], row[:])
	}
}

// bt4 returns Bᵀ x.
func bt4(x [6]float32) [6]float32 {
	a, b := x[4]-float32(4*x[2]), x[3]-float32(4*x[1])
	c, d := x[4]-x[2], x[3]-x[1]
	d += d
	return [6]float32{
		(float32(4*x[0]) + x[4]) - float32(5*x[2]),
		a + b,
		a - b,
		c + d,
		c - d,
		(float32(4*x[1]) + x[5]) - float32(5*x[3]),
	}
}

// at4 returns Aᵀ x.
func at4(x [6]float32) [4]float32 {
	s12, d12, s34, d34 := x[1]+x[2], x[1]-x[2], x[3]+x[4], x[3]-x[4]
	return [4]float32{
		(x[0] + s12) + s34,
		d12 + (d34 + d34),
		s12 + float32(4*s34),
		(d12 + float32(8*d34)) + x[5],
	}
}

// winograd4InGo transforms n channels of a 6x6 input block: src holds pixel
// (r, c) of the block at src[r*row + c*pix], dst receives position ξ's n
// values at dst[ξ*stride:].
func winograd4InGo(dst []float32, stride int, src []float32, row, pix, n int) {
	for ch := 0; ch < n; ch++ {
		var t [6][6]float32 // Bᵀ d
		for c := 0; c < 6; c++ {
			var x [6]float32
			for r := range x {
				x[r] = src[r*row+c*pix+ch]
			}
			for r, v := range bt4(x) {
				t[r][c] = v
			}
		}
		for r := 0; r < 6; r++ { // (Bᵀ d) B
			for c, v := range bt4(t[r]) {
				dst[(r*6+c)*stride+ch] = v
			}
		}
	}
}

// winograd4OutGo transforms n channels of a tile's 36 products back: src
// holds position ξ's values at src[ξ*stride:]; y receives output (r, c)'s
// channel ch at y[(4r+c)*n + ch], before the epilogue.
func winograd4OutGo(y []float32, src []float32, stride, n int) {
	for ch := 0; ch < n; ch++ {
		var t [4][6]float32 // Aᵀ m
		for c := 0; c < 6; c++ {
			var x [6]float32
			for r := range x {
				x[r] = src[(r*6+c)*stride+ch]
			}
			for r, v := range at4(x) {
				t[r][c] = v
			}
		}
		for r := 0; r < 4; r++ { // (Aᵀ m) A
			for c, v := range at4(t[r]) {
				y[(4*r+c)*n+ch] = v
			}
		}
	}
}

// winoTile is the side of a Winograd tile's outputs for layer s with
// kernel family family: 4 for avx2 layers of up to 256 x 256 channels and
// for avx512 layers of up to 128 x 128 run by at most winoDirectThreads
// threads, 2 for the others. F(4x4) does less work a channel, but stage
// 4's 8x8 images make only 4 of its tiles, too few to share out. With
// avx512, F(4x4) in every stage was slower than F(2x2) on 16 threads (its
// 2.25 times the transformed weights, and fewer tasks to share out), while
// on 2 threads F(4x4) in stages 1 and 2 alone was faster at batch 1 and 8.
func winoTile(family string, s Spec) int {
	switch {
	case family == "avx2" && s.In.Pitch*pitch(s.Out) <= 256*256:
		return 4
	case family == "avx512" && s.Threads > 0 && s.Threads <= winoDirectThreads && s.In.Pitch*pitch(s.Out) <= 128*128:
		return 4
	}
	return 2
}

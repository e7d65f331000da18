package conv

// Winograd's F(2x2, 3x3) for the 3x3 convolutions of stride 1 and padding
// 1: each 2x2 block of outputs (a tile) is computed from the 4x4 block of
// input around it as Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A, 16 multiplications per input
// channel instead of 36. F(4x4, 3x3) (winograd4.go) has the same plan with
// 4x4 tiles, 6x6 blocks and 36 positions where this text says 16. Over the
// channels the 16 element-wise products are 16 matrix products (tiles x
// input channels times input channels x output channels), which the direct
// convolution's kernels compute as 1x1 convolutions. A task takes a block
// of tiles and a set of channel groups of at most 64 output channels (one
// avx512 group, four avx2 ones):
//
//  1. it transforms the input of its tiles (Bᵀ d B, 16 values a channel)
//     into per-thread scratch, one plane of tiles x channels per position;
//  2. for each group of the set and each of the 16 positions it multiplies
//     that plane by the group's transformed weights (G g Gᵀ, packed once
//     at NewLayer);
//  3. it transforms the 16 products of each tile back (Aᵀ m A), adds the
//     bias and the residual, clamps at zero and stores the 2x2 outputs.
//
// The transforms only add and subtract, so rounding stays close to the
// direct convolution's (TestLayer, and the ResNet-18 parity test).

// winograd is a layer's Winograd plan.
type winograd struct {
	m      int       // a tile's outputs across and down: 2 for F(2x2, 3x3), 4 for F(4x4, 3x3)
	u      []float32 // transformed weights: pos() planes of In.Pitch x Out.Pitch, each in groups
	th, tw int       // tiles per image, down and across
	tb     int       // most tiles per task (the scratch is sized for it)
	asm    bool      // the transforms run in assembly (else in Go)
	// sets are the channel groups a task covers, as runs [sets[i],
	// sets[i+1]) of Layer.groups of at most 4 units together: the task
	// transforms its tiles' input once for all of them. The avx512
	// family's groups are 4 units, one a set; the avx2 family's are 1.
	sets []int
}

// groupSets returns the runs of groups, of at most 4 units each, that
// winograd.sets holds.
func groupSets(groups []group) []int {
	sets := []int{0}
	units := 0
	for i, gr := range groups {
		if units+gr.units > 4 {
			sets, units = append(sets, i), 0
		}
		units += gr.units
	}
	return append(sets, len(groups))
}

// side is the side of a tile's input block.
func (wg *winograd) side() int { return wg.m + 2 }

// pos is the number of positions of a tile's transformed block: 16 or 36.
func (wg *winograd) pos() int { return wg.side() * wg.side() }

// stride is the distance between two positions' planes of a task's
// scratch for n values a tile: a cache line more than the plane, so that
// the planes do not all fall in the same sets of the L1 cache (a plane of 48
// tiles of 64 channels is 12 KiB; the transforms touch one line of each
// plane in turn).
func (wg *winograd) stride(n int) int { return wg.tb*n + 16 }

// nsets is the number of group sets.
func (wg *winograd) nsets() int { return len(wg.sets) - 1 }

// useWinograd reports whether a layer runs with Winograd: 3x3, stride 1,
// padding 1, AVX-512 or AVX2 kernels, enough input channels for the matrix
// products to run well and at most 512 x 512 channels. Every such layer of
// ResNet-18 qualifies, stage 4 included: with its scratch planes apart
// (winograd.stride) Winograd beat the direct convolution there on both
// kernel families.
func useWinograd(s Spec, family string) bool {
	return winogradAsm(family) && s.K == 3 && s.Stride == 1 && s.Pad == 1 && s.In.Pitch >= 32 && s.In.Pitch*pitch(s.Out) <= 512*512
}

// newWinograd transforms the weights of l (OIHW in w) for its groups, for
// tiles of m x m outputs (2 or 4).
func newWinograd(l *Layer, w []float32, m int) *winograd {
	in, out := l.in, l.out
	wg := &winograd{m: m, th: (out.H + m - 1) / m, tw: (out.W + m - 1) / m, asm: winogradAsm(l.kern.name) && in.Pitch%16 == 0, sets: groupSets(l.groups)}
	// A task's transformed input stays within 512 KiB, or 1.5 MiB for
	// F(2x2) with AVX2, which is stage 4 (512 channels): up to 48 tiles a
	// task instead of 12, where the thread count allows (prepare), so that a
	// task reads its 2 MiB of weights for more tiles.
	budget := 16 * 8192
	if m == 2 && l.kern.name == "avx2" {
		budget *= 3
	}
	wg.tb = max(6, min(48, budget/(wg.pos()*in.Pitch))/6*6)
	plane := in.Pitch * out.Pitch
	wg.u = make([]float32, wg.pos()*plane)
	// weights sets u to a 3x3 kernel's transformed weights.
	u := make([]float64, wg.pos())
	weights := func(g []float32) { winogradWeights((*[16]float64)(u), g) }
	if m == 4 {
		weights = func(g []float32) { winograd4Weights((*[36]float64)(u), g) }
	}
	// Output channels innermost: the 16 stores of a kernel go to 16
	// planes, and consecutive kernels store next to the previous ones.
	for _, gr := range l.groups {
		v := gr.units * unit
		for c := 0; c < in.C; c++ {
			base := gr.u0*unit*in.Pitch + c*v - gr.u0*unit
			for o := gr.u0 * unit; o < min(gr.u0*unit+v, out.C); o++ {
				weights(w[(o*in.C+c)*9:][:9])
				for xi, x := range u {
					wg.u[xi*plane+base+o] = float32(x)
				}
			}
		}
	}
	return wg
}

// winogradWeights sets u to G g Gᵀ for the 3x3 kernel g (row-major), in
// float64, with G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
func winogradWeights(u *[16]float64, g []float32) {
	var t [4][3]float64 // G g
	for j := 0; j < 3; j++ {
		g0, g1, g2 := float64(g[j]), float64(g[3+j]), float64(g[6+j])
		t[0][j] = g0
		t[1][j] = (g0 + g1 + g2) / 2
		t[2][j] = (g0 - g1 + g2) / 2
		t[3][j] = g2
	}
	for i := 0; i < 4; i++ {
		a, b, c := t[i][0], t[i][1], t[i][2]
		u[i*4+0] = a
		u[i*4+1] = (a + b + c) / 2
		u[i*4+2] = (a - b + c) / 2
		u[i*4+3] = c
	}
}

// winogradInGo transforms n channels of a 4x4 input block: src holds pixel
// (r, c) of the block at src[r*row + c*pix], dst receives position ξ's n
// values at dst[ξ*stride:].
func winogradInGo(dst []float32, stride int, src []float32, row, pix, n int) {
	for ch := 0; ch < n; ch++ {
		var d [4][4]float32
		for r := 0; r < 4; r++ {
			for c := 0; c < 4; c++ {
				d[r][c] = src[r*row+c*pix+ch]
			}
		}
		var t [4][4]float32 // Bᵀ d
		for c := 0; c < 4; c++ {
			t[0][c] = d[0][c] - d[2][c]
			t[1][c] = d[1][c] + d[2][c]
			t[2][c] = d[2][c] - d[1][c]
			t[3][c] = d[1][c] - d[3][c]
		}
		for r := 0; r < 4; r++ { // (Bᵀ d) B
			dst[(r*4+0)*stride+ch] = t[r][0] - t[r][2]
			dst[(r*4+1)*stride+ch] = t[r][1] + t[r][2]
			dst[(r*4+2)*stride+ch] = t[r][2] - t[r][1]
			dst[(r*4+3)*stride+ch] = t[r][1] - t[r][3]
		}
	}
}

// winogradOutGo transforms n channels of a tile's 16 products back: src
// holds position ξ's values at src[ξ*stride:]; y receives output (r, c)'s
// channel ch at y[(2r+c)*n + ch], before the epilogue.
func winogradOutGo(y []float32, src []float32, stride, n int) {
	for ch := 0; ch < n; ch++ {
		var m [4][4]float32
		for xi := 0; xi < 16; xi++ {
			m[xi/4][xi%4] = src[xi*stride+ch]
		}
		var t [2][4]float32 // Aᵀ m, A = [1 0; 1 1; 1 -1; 0 -1]
		for c := 0; c < 4; c++ {
			t[0][c] = m[0][c] + m[1][c] + m[2][c]
			t[1][c] = m[1][c] - m[2][c] - m[3][c]
		}
		for r := 0; r < 2; r++ {
			y[(2*r)*n+ch] = t[r][0] + t[r][1] + t[r][2]
			y[(2*r+1)*n+ch] = t[r][1] - t[r][2] - t[r][3]
		}
	}
}

// winoTask computes task t of a Winograd layer: tile block t / sets, group
// set t mod sets. buf is the thread's scratch.
func (c *convRun) winoTask(buf []float32, t int) {
	l := c.l
	wg := l.wino
	in := l.in
	set := t % wg.nsets()
	t0, nt := c.tiles(t)
	ip := in.Pitch
	vs := wg.stride(ip) // stride between the positions' planes of input
	np, a, m := wg.pos(), wg.side(), wg.m
	vb := buf[:np*vs]
	win := buf[np*(vs+wg.stride(4*unit)):][:np*ip] // an edge tile's input block
	tiles := wg.th * wg.tw

	// 1. Input transform.
	for i := 0; i < nt; i++ {
		img, ty, tx := (t0+i)/tiles, (t0+i)%tiles/wg.tw, (t0+i)%wg.tw
		y0, x0 := m*ty-1, m*tx-1
		if y0+a-1 < in.H+in.Pad && x0+a-1 < in.W+in.Pad {
			wg.in(vb[i*ip:], vs, c.in[in.Offset(img, y0, x0):], in.RowPitch(), ip)
			continue
		}
		// The block reaches past the padding: copy what exists.
		clear(win)
		for rr := 0; rr < a; rr++ {
			for cc := 0; cc < a; cc++ {
				if y0+rr < in.H+in.Pad && x0+cc < in.W+in.Pad {
					copy(win[(rr*a+cc)*ip:][:ip], c.in[in.Offset(img, y0+rr, x0+cc):][:ip])
				}
			}
		}
		wg.in(vb[i*ip:], vs, win, a*ip, ip)
	}

	for _, gr := range l.groups[wg.sets[set]:wg.sets[set+1]] {
		c.winoGroup(buf[np*vs:], vb, t0, nt, gr)
	}
}

// in is the input transform of a tile's block of n channels, pixel (r, c)
// at src[r*row + c*n], into position ξ at dst[ξ*stride:].
func (wg *winograd) in(dst []float32, stride int, src []float32, row, n int) {
	switch {
	case wg.m == 4 && wg.asm:
		winograd4InAsm(dst, stride, src, row, n, n)
	case wg.m == 4:
		winograd4InGo(dst, stride, src, row, n, n)
	case wg.asm:
		winogradInAsm(dst, stride, src, row, n, n)
	default:
		winogradInGo(dst, stride, src, row, n, n)
	}
}

// out is the output transform and epilogue of a whole tile's n channels, in
// assembly (see winogradOutAsm and winograd4OutAsm).
func (wg *winograd) out(dst []float32, row, pix int, src []float32, stride int, bias, res []float32, relu bool, n int) {
	if wg.m == 4 {
		winograd4OutAsm(dst, row, pix, src, stride, bias, res, relu, n)
		return
	}
	winogradOutAsm(dst, row, pix, src, stride, bias, res, relu, n)
}

// winoGroup computes group gr's outputs of the nt tiles from t0 on, whose
// transformed input is in vb; mb is scratch for the products.
func (c *convRun) winoGroup(mb, vb []float32, t0, nt int, gr group) {
	l := c.l
	wg := l.wino
	in, out := l.in, l.out
	v := gr.units * unit
	ip := in.Pitch
	vs, ms := wg.stride(ip), wg.stride(v) // strides between the positions' planes
	np, m := wg.pos(), wg.m
	mb = mb[:np*ms]
	tiles := wg.th * wg.tw

	// 2. The 16 or 36 matrix products, as 1x1 convolutions over the tiles.
	p := l.kern.maxP[gr.units]
	tl := tile{nky: 1, nkx: 1, nc: ip, xpix: ip, opix: v}
	for xi := 0; xi < np; xi++ {
		tl.w = wg.u[xi*ip*out.Pitch+gr.u0*unit*ip:]
		for i := 0; i < nt; i += p {
			tl.x = vb[xi*vs+i*ip:]
			tl.out = mb[xi*ms+i*v:]
			l.kern.run(min(p, nt-i), gr.units, &tl)
		}
	}

	// 3. Output transform and epilogue.
	var y [16 * 4 * unit]float32
	bias := l.bias[gr.u0*unit:][:v]
	for i := 0; i < nt; i++ {
		img, ty, tx := (t0+i)/tiles, (t0+i)%tiles/wg.tw, (t0+i)%wg.tw
		switch {
		case wg.asm && m*ty+m-1 < out.H && m*tx+m-1 < out.W:
			o := out.Offset(img, m*ty, m*tx) + gr.u0*unit
			var res []float32
			if c.res != nil {
				res = c.res[o:]
			}
			wg.out(c.out[o:], out.RowPitch(), out.Pitch, mb[i*v:], ms, bias, res, l.relu, v)
		case wg.asm:
			c.winoEdge(mb[i*v:], ms, img, ty, tx, gr, bias)
		default:
			if m == 4 {
				winograd4OutGo(y[:], mb[i*v:], ms, v)
			} else {
				winogradOutGo(y[:], mb[i*v:], ms, v)
			}
			c.winoEpilogue(y[:], img, ty, tx, gr, bias)
		}
		if tx == 0 {
			for dy := 0; dy < m && m*ty+dy < out.H; dy++ {
				zeroPadding(c.out, out, img, m*ty+dy, gr.u0*unit, v)
			}
		}
	}
}

// winoEdge is the output transform and epilogue of a tile that reaches
// past the bottom or right edge of an image, in assembly: the whole tile
// goes to a buffer (its residual, where there is one, copied in first, zero
// past the image) and the pixels inside the image are copied out.
func (c *convRun) winoEdge(mb []float32, stride, img, ty, tx int, gr group, bias []float32) {
	l, out, m := c.l, c.l.out, c.l.wino.m
	v := gr.units * unit
	var y, rb [16 * 4 * unit]float32 // m x m pixels of v values: pixel (dy, dx) at (m*dy+dx)*v
	var res []float32
	if c.res != nil {
		res = rb[:]
		for dy := 0; dy < m && m*ty+dy < out.H; dy++ {
			for dx := 0; dx < m && m*tx+dx < out.W; dx++ {
				o := out.Offset(img, m*ty+dy, m*tx+dx) + gr.u0*unit
				copy(rb[(m*dy+dx)*v:][:v], c.res[o:][:v])
			}
		}
	}
	l.wino.out(y[:], m*v, v, mb, stride, bias, res, l.relu, v)
	for dy := 0; dy < m && m*ty+dy < out.H; dy++ {
		for dx := 0; dx < m && m*tx+dx < out.W; dx++ {
			o := out.Offset(img, m*ty+dy, m*tx+dx) + gr.u0*unit
			copy(c.out[o:][:v], y[(m*dy+dx)*v:][:v])
		}
	}
}

// winoEpilogue adds the bias and residual to a tile's outputs y (pixel
// (dy, dx) at (m*dy+dx)*v), clamps them at zero for a ReLU layer and stores
// those inside the image.
func (c *convRun) winoEpilogue(y []float32, img, ty, tx int, gr group, bias []float32) {
	l, out, m := c.l, c.l.out, c.l.wino.m
	v := gr.units * unit
	for dy := 0; dy < m && m*ty+dy < out.H; dy++ {
		for dx := 0; dx < m && m*tx+dx < out.W; dx++ {
			o := out.Offset(img, m*ty+dy, m*tx+dx) + gr.u0*unit
			dst := c.out[o:][:v]
			var res []float32
			if c.res != nil {
				res = c.res[o:][:v]
			}
			for ch, s := range y[(m*dy+dx)*v:][:v] {
				s += bias[ch]
				if res != nil {
					s += res[ch]
				}
				if l.relu && s < 0 {
					s = 0
				}
				dst[ch] = s
			}
		}
	}
}

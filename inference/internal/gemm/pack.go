package gemm

// packA writes rows i0..i0+mb and columns p0..p0+kc of A (row stride lda) into
// dst as ceil(mb/mr) panels, panel q holding rows i0+q*mr.. as kc columns of
// mr values; rows past i0+mb are zero.
func packA(dst, a []float32, lda, i0, mb, p0, kc, mr int) {
	for ir := 0; ir < mb; ir += mr {
		panel := dst[ir*kc : ir*kc+kc*mr]
		rows := min(mr, mb-ir)
		for r := 0; r < rows; r++ {
			src := a[(i0+ir+r)*lda+p0 : (i0+ir+r)*lda+p0+kc]
			for p, v := range src {
				panel[p*mr+r] = v
			}
		}
		for r := rows; r < mr; r++ {
			for p := 0; p < kc; p++ {
				panel[p*mr+r] = 0
			}
		}
	}
}

// matrixB is a B stored as a row-major matrix.
type matrixB struct {
	b   []float32
	ldb int
}

func (s *matrixB) pack(buf *buffers, p0, kc, j0, nc, nr int) {
	dst := buf.b
	full := nc / nr * nr
	for p := 0; p < kc; p++ {
		src := s.b[(p0+p)*s.ldb+j0 : (p0+p)*s.ldb+j0+nc]
		for jr := 0; jr < full; jr += nr {
			copy(dst[jr*kc+p*nr:jr*kc+p*nr+nr], src[jr:jr+nr])
		}
		if full < nc {
			d := dst[full*kc+p*nr : full*kc+p*nr+nr]
			n := copy(d, src[full:])
			clear(d[n:])
		}
	}
}

// convB is the implicit im2col matrix of a convolution over a CNHW tensor:
// row (c*K+ky)*K+kx, column (n*OutH+oy)*OutW+ox holds
// x[c][n][oy*Stride-Pad+ky][ox*Stride-Pad+kx], or zero outside the image.
type convB struct {
	x      []float32
	s      ConvShape
	oh, ow int
}

func newConvB(x []float32, s ConvShape) convB {
	return convB{x: x, s: s, oh: s.OutH(), ow: s.OutW()}
}

// segment is a run of B columns within one output row of one image, which
// read one input row (at a stride) for every row of B.
type segment struct {
	dst  int // offset of the first column in the packed block
	n    int // columns
	base int // offset of the image in a channel plane
	iy   int // input row for ky = 0
	ix   int // input column of the first column for kx = 0
}

func (s *convB) pack(buf *buffers, p0, kc, j0, nc, nr int) {
	sh := &s.s
	st, pad, h, w, kk := sh.Stride, sh.Pad, sh.H, sh.W, sh.K
	dst := buf.b

	// Cut the block's columns into runs within one output row and one panel.
	segs := buf.segs[:0]
	plane := s.oh * s.ow
	img, rem := j0/plane, j0%plane
	oy, ox := rem/s.ow, rem%s.ow
	for t := 0; t < nc; {
		q, off := t/nr, t%nr
		n := min(nr-off, s.ow-ox, nc-t)
		segs = append(segs, segment{dst: q*kc*nr + off, n: n, base: img * h * w, iy: oy*st - pad, ix: ox*st - pad})
		t += n
		ox += n
		if ox == s.ow {
			ox = 0
			oy++
			if oy == s.oh {
				oy = 0
				img++
			}
		}
	}
	buf.segs = segs
	if tail := nc % nr; tail != 0 {
		last := (nc / nr) * kc * nr
		for p := 0; p < kc; p++ {
			clear(dst[last+p*nr+tail : last+p*nr+nr])
		}
	}

	chw := sh.N * h * w
	x := s.x
	for p := 0; p < kc; p++ {
		pp := p0 + p
		ci := pp / (kk * kk)
		r := pp - ci*kk*kk
		ky := r / kk
		kx := r - ky*kk
		cbase := ci * chw
		for _, sg := range segs {
			d := dst[sg.dst+p*nr : sg.dst+p*nr+sg.n]
			iy := sg.iy + ky
			if uint(iy) >= uint(h) {
				clear(d)
				continue
			}
			row := x[cbase+sg.base+iy*w : cbase+sg.base+iy*w+w]
			ix := sg.ix + kx
			// Columns u0..u1 read inside the row; the others are padding.
			u0, u1 := 0, sg.n
			if ix < 0 {
				u0 = min((-ix+st-1)/st, sg.n)
			}
			if last := ix + (sg.n-1)*st; last >= w {
				u1 = u0
				if ix <= w-1 {
					u1 = max((w-1-ix)/st+1, u0)
				}
			}
			if u0 > 0 {
				clear(d[:u0])
			}
			if u1 < len(d) {
				clear(d[u1:])
			}
			if u0 == u1 {
				continue
			}
			dd := d[u0:u1]
			first := ix + u0*st
			switch st {
			case 1:
				src := row[first : first+len(dd)]
				switch len(dd) {
				case 32:
					*(*[32]float32)(dd) = *(*[32]float32)(src)
				case 16:
					*(*[16]float32)(dd) = *(*[16]float32)(src)
				default:
					copy(dd, src)
				}
			case 2:
				gather2(dd, row[first:first+2*len(dd)-1])
			default:
				for u := range dd {
					dd[u] = row[first+u*st]
				}
			}
		}
	}
}

// gather2 sets d[u] = src[2u]; len(src) >= 2*len(d)-1.
func gather2(d, src []float32) {
	u := 0
	for ; u+4 <= len(d); u += 4 {
		s := src[2*u : 2*u+7 : 2*u+7]
		dd := d[u : u+4 : u+4]
		dd[0], dd[1], dd[2], dd[3] = s[0], s[2], s[4], s[6]
	}
	for ; u < len(d); u++ {
		d[u] = src[2*u]
	}
}

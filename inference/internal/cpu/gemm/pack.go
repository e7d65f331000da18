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

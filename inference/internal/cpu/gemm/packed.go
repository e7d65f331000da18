package gemm

import (
	"fmt"

	"github.com/inferbench/inferbench/inference/internal/switches"
)

// PackedA is a left operand (m x k) packed once for products that reuse it,
// such as a layer's weights: a product with a PackedA skips step 4 of the
// package comment. It is read-only after NewPackedA and safe for concurrent
// use.
type PackedA struct {
	m, k  int
	packs []packing // one per panel height of the supported kernels
}

// packing is A packed for one panel height: for each k block of kBlock(k)
// columns (the last one shorter), ceil(m/mr) panels of mr x kb values.
type packing struct {
	mr   int
	data []float32
}

// NewPackedA packs the m x k matrix a (row stride lda) for the kernels
// named, chosen as Config.Kernel chooses (an empty name is the kernel New
// picks for an empty Config.Kernel). A Context whose kernel has the panel
// height of one of them can use it.
func NewPackedA(m, k int, a []float32, lda int, names ...string) (*PackedA, error) {
	if m < 1 || k < 1 {
		return nil, fmt.Errorf("gemm: packed A is %d x %d, want at least 1 x 1", m, k)
	}
	if err := checkMatrix("A", m, k, a, lda); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		names = []string{""}
	}
	p := &PackedA{m: m, k: k}
	kc := kBlock(k)
	for _, name := range names {
		if name == "" {
			name = switches.GemmKernel.Value()
		}
		kern, err := findKernel(name)
		if err != nil {
			return nil, err
		}
		if p.find(kern.mr) != nil {
			continue
		}
		mpad := (m + kern.mr - 1) / kern.mr * kern.mr
		pk := packing{mr: kern.mr, data: make([]float32, mpad*k)}
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			packA(pk.data[pc*mpad:], a, lda, 0, m, pc, kb, kern.mr)
		}
		p.packs = append(p.packs, pk)
	}
	return p, nil
}

// Rows and Cols are the shape of the packed matrix.
func (p *PackedA) Rows() int { return p.m }

// Cols is the number of columns (k) of the packed matrix.
func (p *PackedA) Cols() int { return p.k }

func (p *PackedA) find(mr int) *packing {
	for i := range p.packs {
		if p.packs[i].mr == mr {
			return &p.packs[i]
		}
	}
	return nil
}

// kBlock is the k block size for a product with k columns of A: blocks of at
// most kcMax, as equal as possible.
func kBlock(k int) int {
	nkb := (k + kcMax - 1) / kcMax
	return (k + nkb - 1) / nkb
}

// GemmPacked is Gemm with A packed in advance.
func (c *Context) GemmPacked(a *PackedA, n int, b []float32, ldb int, out []float32, ldc int, ep Epilogue) error {
	if err := checkMatrix("B", a.k, n, b, ldb); err != nil {
		return err
	}
	pk := a.find(c.kern.mr)
	if pk == nil {
		return fmt.Errorf("gemm: A was packed for another kernel than %s", c.kern.name)
	}
	src := &c.job.mat
	*src = matrixB{b: b, ldb: ldb}
	c.job.pa = pk.data
	defer func() { c.job.pa = nil }()
	return c.run(a.m, n, a.k, nil, 0, src, out, ldc, ep)
}

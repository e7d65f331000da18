// Package conv runs the convolutions of the CPU back-end directly on padded
// NHWC tensors, with AVX-512 or AVX2 micro-kernels in assembly where the CPU
// has them and a portable Go kernel elsewhere, split over a set of threads.
//
// A layer computes out = ReLU?(conv(in, w) + bias [+ res]). The 3x3 layers
// of stride 1 with at least 32 input channels and at most 512 x 512 input
// and output channels run as Winograd (winograd.go, winograd4.go): where
// the kernels are AVX2, F(4x4, 3x3) up to 256 x 256 channels and F(2x2,
// 3x3) above; where they are AVX-512, F(2x2, 3x3), or F(4x4, 3x3) up to
// 128 x 128 channels on up to two threads (winoTile). On few threads, a
// pass of too few tiles runs direct (Layer.at). Every other layer runs as a
// direct convolution in four steps:
//
//  1. At NewLayer the weights are packed for the kernel family: output
//     channels in groups of 16, 32 or 64 (the kernels' vector registers), and
//     for each group the weights of every (kernel row, kernel column, input
//     channel) one after another, so the kernels read them as one stream.
//  2. Run cuts the output into tasks (a range of output rows of any image
//     times one set of channel groups: one group, or with AVX2 as many as
//     have up to 512 KiB of weights), enough to keep every thread busy, and
//     the threads take tasks in turn. The steps of a forward pass can run as
//     one job (Runner.Begin and End), in which a thread that finds no task
//     of a step left starts the next step's tasks whose input rows are
//     written, instead of waiting at the step's end.
//  3. For each row of a task, the kernel computes P pixels of the row at a
//     time (the last call takes what is left) for each group of the set in
//     turn, keeping the P x group tile in registers over the whole sum: no
//     im2col matrix, no packing of the input, which the kernel reads in
//     place thanks to the zero padding around every image.
//  4. The kernel applies the epilogue (bias, residual, ReLU) to the tile in
//     registers and stores it; the task then zeroes the padding of its rows,
//     so the output is ready for the next layer.
package conv

import (
	"fmt"
)

// Layout is where one image lies in a float32 buffer: H rows of W pixels,
// each pixel Pitch values of which the first C are channels and the rest
// zero (NHWC order), surrounded by Pad rows and columns of zeros. A batch
// is images one after another.
type Layout struct {
	H, W, C    int
	Pitch, Pad int
}

// RowPitch is the number of values from one row to the next.
func (l Layout) RowPitch() int { return (l.W + 2*l.Pad) * l.Pitch }

// ImagePitch is the number of values from one image to the next.
func (l Layout) ImagePitch() int { return (l.H + 2*l.Pad) * l.RowPitch() }

// Size is the number of values of n images.
func (l Layout) Size(n int) int { return n * l.ImagePitch() }

// Offset is the index of channel 0 of pixel (y, x) of image n; y and x may
// lie in the padding (from -Pad).
func (l Layout) Offset(n, y, x int) int {
	return n*l.ImagePitch() + (y+l.Pad)*l.RowPitch() + (x+l.Pad)*l.Pitch
}

// pitch is the pitch of a tensor of c channels written by a layer: whole
// units of 16 values.
func pitch(c int) int { return (c + unit - 1) / unit * unit }

// Spec describes a convolution layer.
type Spec struct {
	In          Layout    // the input's layout; In.Pad must be at least Pad
	Out, K      int       // output channels, kernel height and width
	Stride, Pad int       // stride and zero padding of the convolution
	Weight      []float32 // Out x In.C x K x K (OIHW, PyTorch's order)
	Bias        []float32 // Out values, or nil
	ReLU        bool      // clamp the output at zero
	OutPad      int       // zero rows and columns around each output image
	Kernel      string    // kernel family (see Kernels); "" picks the fastest
	// Tile overrides NewLayer's plan for a layer its rule runs with
	// Winograd: 0 keeps the rule's tile, 2 or 4 runs F(2x2, 3x3) or
	// F(4x4, 3x3), -1 a direct convolution. Tests set it to check every
	// plan; the back-end leaves it 0.
	Tile int
	// Threads is how many threads will run the layer, 0 if unknown: the
	// direct plan for passes of few tiles (Layer.at) is kept only where
	// it may run.
	Threads int
}

// Layer is a packed convolution layer. It is read-only after NewLayer and
// safe for concurrent use.
type Layer struct {
	kern   *kernels
	in     Layout
	out    Layout
	k      int
	stride int
	pad    int
	relu   bool
	groups []group   // output channel groups
	w      []float32 // packed weights (direct convolution)
	bias   []float32 // out.Pitch values
	px     []int     // pixels per kernel call, by group size in units
	sets   []int     // direct: a task's groups are groups[sets[i]:sets[i+1]]
	wino   *winograd // the Winograd plan, or nil for the direct convolution
	// direct is the same layer as a direct convolution, which passes of
	// fewer than winoMinTiles tiles run instead (see at); nil where every
	// pass has enough, or where Spec.Tile chose the plan.
	direct *Layer
}

// winoMinTiles is the fewest tiles a pass of a Winograd layer needs, on at
// most winoDirectThreads threads, for NewLayer's rule to run it with
// Winograd. Each transformed weight serves every tile once, and F(2x2)'s
// transformed weights are 16/9 of the direct convolution's: with few tiles
// (16 in stage 4 of ResNet-18 at one image) a pass waits on reading the
// weights from memory, and on 2 threads the direct convolution, which reads
// fewer bytes, was faster. On 16 threads it was slower (why was not
// measured), so more threads keep Winograd.
const (
	winoMinTiles      = 32
	winoDirectThreads = 2
)

// at is the plan of l for passes of n images on t threads.
func (l *Layer) at(n, t int) *Layer {
	if l != nil && l.direct != nil && t <= winoDirectThreads && n*l.wino.th*l.wino.tw < winoMinTiles {
		return l.direct
	}
	return l
}

// group is a run of output channels computed by one kernel call.
type group struct {
	u0, units int // first unit and number of units
	w         int // offset of the group's weights in Layer.w
}

// NewLayer checks s and packs its weights. 3x3 layers of stride 1 with
// enough channels run with Winograd's F(4x4, 3x3) (AVX2, up to 256
// channels) or F(2x2, 3x3) (AVX-512, and AVX2 above 256 channels; see
// winograd.go and winograd4.go) unless s.Tile says otherwise, the others as
// a direct convolution. A Winograd layer of fewer than winoMinTiles tiles
// an image also keeps a direct plan, for passes of too few images on few
// threads.
func NewLayer(s Spec) (*Layer, error) {
	kern, err := findKernels(s.Kernel)
	if err != nil {
		return nil, err
	}
	tile := s.Tile
	switch {
	case tile != 0 && tile != -1 && tile != 2 && tile != 4:
		return nil, fmt.Errorf("conv: Winograd tile %d, want 0, -1, 2 or 4", tile)
	case !useWinograd(s, kern.name) || tile == -1:
		tile = 0
	case tile == 0:
		tile = winoTile(kern.name, s)
	}
	l, err := newLayer(s, tile)
	if err != nil {
		return nil, err
	}
	if s.Tile == 0 && s.Threads <= winoDirectThreads && l.wino != nil && l.wino.th*l.wino.tw < winoMinTiles {
		if l.direct, err = newLayer(s, 0); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// newLayer is NewLayer with Winograd tiles of tile x tile outputs (2 or 4),
// or a direct convolution for tile 0, whatever the layer.
func newLayer(s Spec, tile int) (*Layer, error) {
	in := s.In
	switch {
	case in.H < 1 || in.W < 1 || in.C < 1 || in.Pitch < in.C || in.Pad < 0:
		return nil, fmt.Errorf("conv: bad input layout %+v", in)
	case s.Out < 1 || s.K < 1 || s.Stride < 1 || s.Pad < 0 || s.OutPad < 0:
		return nil, fmt.Errorf("conv: bad layer %d outputs, kernel %d, stride %d, padding %d, output padding %d",
			s.Out, s.K, s.Stride, s.Pad, s.OutPad)
	case in.Pad < s.Pad:
		return nil, fmt.Errorf("conv: input padding %d is less than the layer's %d", in.Pad, s.Pad)
	case len(s.Weight) != s.Out*in.C*s.K*s.K:
		return nil, fmt.Errorf("conv: %d weights, want %d", len(s.Weight), s.Out*in.C*s.K*s.K)
	case s.Bias != nil && len(s.Bias) != s.Out:
		return nil, fmt.Errorf("conv: %d biases, want %d", len(s.Bias), s.Out)
	}
	oh, ow := (in.H+2*s.Pad-s.K)/s.Stride+1, (in.W+2*s.Pad-s.K)/s.Stride+1
	if oh < 1 || ow < 1 {
		return nil, fmt.Errorf("conv: %dx%d input is smaller than the %dx%d kernel", in.H, in.W, s.K, s.K)
	}
	kern, err := findKernels(s.Kernel)
	if err != nil {
		return nil, err
	}
	l := &Layer{
		kern: kern, in: in, k: s.K, stride: s.Stride, pad: s.Pad, relu: s.ReLU,
		out: Layout{H: oh, W: ow, C: s.Out, Pitch: pitch(s.Out), Pad: s.OutPad},
	}
	l.bias = make([]float32, l.out.Pitch)
	copy(l.bias, s.Bias)
	l.px = make([]int, len(kern.maxP))
	for g, maxP := range kern.maxP {
		l.px[g] = pixels(ow, maxP)
	}
	// Groups: as many of the largest size as fit, then smaller ones.
	per := s.K * s.K * in.Pitch // weights per output channel, padded
	for u, units := 0, l.out.Pitch/unit; u < units; {
		g := len(kern.maxP) - 1
		for kern.maxP[g] == 0 || u+g > units {
			g--
		}
		l.groups = append(l.groups, group{u0: u, units: g, w: u * unit * per})
		u += g
	}
	if tile != 0 && s.K == 3 && s.Stride == 1 && s.Pad == 1 {
		l.wino = newWinograd(l, s.Weight, tile)
		return l, nil
	}
	l.packDirect(s.Weight)
	l.sets = directSets(l.groups, per, directSetBytes(kern.name))
	return l, nil
}

// directSetBytes is how many bytes of weights a task of a direct
// convolution may cover (see directSets) with kernel family family.
//
// A task computes several channel groups for each block of pixels, so it
// reads its input once rather than once a group; where the groups' weights
// overflow L1 anyway, this costs no more weight reads. The budget stays
// under 1 MiB: a larger one was slower. Other
// families keep a group a task: they were not measured.
func directSetBytes(family string) int {
	if family == "avx2" {
		return 512 << 10
	}
	return 0
}

// directSets cuts groups, whose weights are per values an output channel,
// into runs of consecutive groups of at most most bytes of weights; a group
// larger than most is a run of its own.
func directSets(groups []group, per, most int) []int {
	sets, bytes := []int{0}, 0
	for i, gr := range groups {
		b := 4 * gr.units * unit * per
		if i > 0 && bytes+b > most {
			sets, bytes = append(sets, i), 0
		}
		bytes += b
	}
	return append(sets, len(groups))
}

// packDirect packs the direct convolution's weights w (OIHW) for every
// group.
func (l *Layer) packDirect(w []float32) {
	l.w = make([]float32, l.out.Pitch*l.k*l.k*l.in.Pitch)
	for _, gr := range l.groups {
		l.pack(gr, w)
	}
}

// pixels is the number of pixels per kernel call for rows of ow pixels with
// kernels of up to maxP pixels: the count that minimises the calls' cost,
// modelled as the pixels computed plus two for each call (the weights a call
// loads, shared by its pixels); on a tie, the count whose smallest call (the
// last) is largest, since small calls use the registers least.
func pixels(ow, maxP int) int {
	if maxP == 0 {
		return 0
	}
	best, bestCost, bestLast := 1, -1, 0
	for p := 1; p <= min(maxP, ow); p++ {
		last := ow % p
		cost := ow/p*(p+2) + min(last, 1)*(last+2)
		if last == 0 {
			last = p
		}
		if bestCost < 0 || cost < bestCost || cost == bestCost && last >= bestLast {
			best, bestCost, bestLast = p, cost, last
		}
	}
	return best
}

// pack writes the weights of group gr: for each kernel row, kernel column
// and input channel (In.Pitch of them), the group's output channels (zero
// past s.Out and past In.C).
func (l *Layer) pack(gr group, w []float32) {
	k, in := l.k, l.in
	v := gr.units * unit
	dst := l.w[gr.w:]
	i := 0
	for ky := 0; ky < k; ky++ {
		for kx := 0; kx < k; kx++ {
			for c := 0; c < in.Pitch; c++ {
				for o := gr.u0 * unit; o < gr.u0*unit+v; o++ {
					if o < l.out.C && c < in.C {
						dst[i] = w[((o*in.C+c)*k+ky)*k+kx]
					}
					i++
				}
			}
		}
	}
}

// In is the layout the layer reads.
func (l *Layer) In() Layout { return l.in }

// Out is the layout the layer writes.
func (l *Layer) Out() Layout { return l.out }

// Kernel is the name of the layer's kernel family.
func (l *Layer) Kernel() string { return l.kern.name }

// flops is the number of floating-point operations of the layer for one
// image (two per multiply-add of the unpadded convolution).
func (l *Layer) flops() int {
	return 2 * l.out.H * l.out.W * l.out.C * l.in.C * l.k * l.k
}

//go:build cuda && linux && cgo

package cuda

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/gpu/cudnn"
)

//go:generate nvcc -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80 -o normalize.fatbin kernels/normalize.cu

// normalizeImage is the input conversion kernels of kernels/normalize.cu: a
// fat binary with machine code for compute capability 8.0 (A100) and 9.0
// (H100, H200), which loads without compiling, and PTX for 8.0, which the
// driver compiles for any later device (slow on a first start, when the
// driver's compute cache is empty).
//
//go:embed normalize.fatbin
var normalizeImage []byte

// convThreads is the threads per block of a conversion launch, and
// maxConvBlocks the most blocks (each thread then converts several pixels).
const (
	convThreads   = 256
	maxConvBlocks = 2048
)

// kernelName is the kernel that converts NCHW input of the given kind (uint8
// bytes, or float32 values) to the input tensor of net's stem (its format,
// type and, for the s2d stem, its space-to-depth form), or "" when float32
// input needs no conversion (an fp32 NCHW network reads it as it is).
func kernelName(uint8In bool, net *network) string {
	in := "f32"
	if uint8In {
		in = "u8"
	}
	out := "f32"
	if net.dataType == cudnn.Half {
		out = "f16"
	}
	layout := "nchw"
	if net.format == cudnn.NHWC {
		layout = "nhwc"
		if net.stem == stemS2D {
			layout = "s2d"
		}
	}
	if !uint8In && out == "f32" && layout == "nchw" {
		return ""
	}
	return "norm_" + in + "_" + layout + "_" + out
}

// conversion is one loaded conversion kernel and what it is launched with.
type conversion struct {
	fn    cudadrv.Function
	table uintptr      // uint8: the device copy of the normalisation table
	plane int          // pixels per image of the output
	s2d   *s2dGeometry // the space-to-depth kernels' geometry; nil for the others
}

// s2dGeometry is what a space-to-depth kernel needs besides the pointers:
// the image's height and width, the space-to-depth input's rows and columns,
// and the stem's padding (stem.go).
type s2dGeometry struct{ height, width, rows, cols, pad int }

// inputKernels is the conversion kernels' module on one device, loaded in
// its context, and the uint8 table: u8 converts uint8 input, f32 float32
// input (when f32Apply: the network needs a conversion).
type inputKernels struct {
	mod      cudadrv.Module
	table    uintptr // 3 x 256 float32, backend.Normalization.Table
	u8, f32  conversion
	f32Apply bool
}

// loadInputKernels loads the conversion kernels for net into the current
// context and uploads norm's table (checked) for uint8 input.
func loadInputKernels(net *network, norm backend.Normalization, height, width int) (k *inputKernels, err error) {
	const channels = 3
	if err := norm.Check(channels); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	k = &inputKernels{}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("cuda: input kernels: %w", err), k.unload())
			k = nil
		}
	}()
	if k.mod, err = cudadrv.LoadModule(normalizeImage); err != nil {
		return k, err
	}
	table := norm.Table()
	bytes := int(unsafe.Sizeof(table[0])) * len(table)
	if k.table, err = cudadrv.MemAlloc(bytes); err != nil {
		return k, err
	}
	if err = cudadrv.MemcpyHtoD(k.table, unsafe.Pointer(&table[0]), bytes); err != nil {
		return k, err
	}
	plane := height * width
	var g *s2dGeometry
	if net.stem == stemS2D {
		s := net.convs[0]
		g = &s2dGeometry{height: height, width: width, rows: s.inH, cols: s.inW, pad: net.stemPad}
		plane = s.inH * s.inW
	}
	k.u8 = conversion{table: k.table, plane: plane, s2d: g}
	if k.u8.fn, err = k.mod.Function(kernelName(true, net)); err != nil {
		return k, err
	}
	if name := kernelName(false, net); name != "" {
		k.f32 = conversion{plane: plane, s2d: g}
		if k.f32.fn, err = k.mod.Function(name); err != nil {
			return k, err
		}
		k.f32Apply = true
	}
	return k, nil
}

// unload frees the table and unloads the module (in the context they were
// made in).
func (k *inputKernels) unload() error {
	if k == nil {
		return nil
	}
	var errs []error
	if k.table != 0 {
		errs = append(errs, cudadrv.MemFree(k.table))
		k.table = 0
	}
	if !k.mod.IsZero() {
		errs = append(errs, k.mod.Unload())
		k.mod = cudadrv.Module{}
	}
	return errors.Join(errs...)
}

// params packs the kernel's parameters for n images from x to y: two
// pointers, then struct conv_params (table pointer, plane, pixels), 32 bytes
// in all, or, for a space-to-depth kernel, struct s2d_params (table pointer,
// height, width, rows, cols, pad, pixels), 48 bytes in all.
func (c *conversion) params(x, y uintptr, n int) []byte {
	ptrs := []uintptr{x, y, c.table}
	if g := c.s2d; g != nil {
		return kernelParams(ptrs, g.height, g.width, g.rows, g.cols, g.pad, n*c.plane)
	}
	return kernelParams(ptrs, c.plane, n*c.plane)
}

// launch enqueues the conversion of n images from x to y on s.
func (c *conversion) launch(s cudadrv.Stream, x, y uintptr, n int) error {
	pixels := n * c.plane
	if pixels <= 0 || pixels > math.MaxInt32-convThreads*maxConvBlocks {
		return fmt.Errorf("cuda: input conversion of %d pixels", pixels)
	}
	blocks := min((pixels+convThreads-1)/convThreads, maxConvBlocks)
	return c.fn.Launch(s, blocks, convThreads, 0, c.params(x, y, n))
}

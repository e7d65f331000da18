//go:build cuda && linux && cgo

package cuda

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/cudadrv"
	"github.com/inferbench/inferbench/inference/internal/cudnn"
)

//go:generate nvcc -arch=compute_80 -ptx -o normalize.ptx kernels/normalize.cu

// normalizePTX is the input conversion kernels of kernels/normalize.cu,
// compiled for compute capability 8.0 and later (the driver compiles the PTX
// for the device it loads on).
//
//go:embed normalize.ptx
var normalizePTX []byte

// maxChannels is MAXC of kernels/normalize.cu.
const maxChannels = 4

// convThreads is the threads per block of a conversion launch.
const convThreads = 256

// kernelName is the kernel that converts NCHW input of the given kind (uint8
// bytes, or float32 values) to the network's input tensor, or "" when float32
// input needs no conversion (an fp32 NCHW network reads it as it is).
func kernelName(uint8In bool, f cudnn.Format, dt cudnn.DataType) string {
	in := "f32"
	if uint8In {
		in = "u8"
	}
	out := "f32"
	if dt == cudnn.Half {
		out = "f16"
	}
	layout := "nchw"
	if f == cudnn.NHWC {
		layout = "nhwc"
	}
	if !uint8In && out == "f32" && layout == "nchw" {
		return ""
	}
	return "norm_" + in + "_" + layout + "_" + out
}

// conversion is one loaded conversion kernel and the per-channel constants
// it is launched with.
type conversion struct {
	fn        cudadrv.Function
	mean, std [maxChannels]float32
	div       float32
	channels  int
	plane     int // pixels per image
}

// inputKernels is the conversion kernels' module on one device, loaded in
// its context; u8 converts uint8 input, f32 float32 input (its function is
// zero when the network reads float32 input as it is).
type inputKernels struct {
	mod      cudadrv.Module
	u8, f32  conversion
	f32Apply bool // f32 is loaded
}

// loadInputKernels loads the conversion kernels for net into the current
// context, with norm (checked) for uint8 input and the identity for float32.
func loadInputKernels(net *network, norm backend.Normalization, height, width int) (*inputKernels, error) {
	const channels = 3
	if err := norm.Check(channels); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	mod, err := cudadrv.LoadModule(normalizePTX)
	if err != nil {
		return nil, fmt.Errorf("cuda: input kernels: %w", err)
	}
	k := &inputKernels{mod: mod}
	fail := func(err error) (*inputKernels, error) {
		return nil, errors.Join(fmt.Errorf("cuda: input kernels: %w", err), mod.Unload())
	}
	k.u8 = conversion{div: 255, channels: channels, plane: height * width}
	copy(k.u8.mean[:], norm.Mean)
	copy(k.u8.std[:], norm.Std)
	if k.u8.fn, err = mod.Function(kernelName(true, net.format, net.dataType)); err != nil {
		return fail(err)
	}
	if name := kernelName(false, net.format, net.dataType); name != "" {
		k.f32 = conversion{div: 1, channels: channels, plane: height * width}
		for c := range channels {
			k.f32.std[c] = 1
		}
		if k.f32.fn, err = mod.Function(name); err != nil {
			return fail(err)
		}
		k.f32Apply = true
	}
	return k, nil
}

// unload unloads the module (in the context it was loaded in).
func (k *inputKernels) unload() error {
	if k == nil || k.mod.IsZero() {
		return nil
	}
	err := k.mod.Unload()
	k.mod = cudadrv.Module{}
	return err
}

// params packs the kernel's parameters for n images from x to y: two
// pointers, then struct norm_params (mean[4], std[4], div, channels, plane,
// pixels), 64 bytes.
func (c *conversion) params(x, y uintptr, n int) []byte {
	b := make([]byte, 0, 64)
	b = binary.LittleEndian.AppendUint64(b, uint64(x))
	b = binary.LittleEndian.AppendUint64(b, uint64(y))
	for _, v := range c.mean {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	for _, v := range c.std {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(c.div))
	b = binary.LittleEndian.AppendUint32(b, uint32(c.channels))
	b = binary.LittleEndian.AppendUint32(b, uint32(c.plane))
	b = binary.LittleEndian.AppendUint32(b, uint32(n*c.plane))
	return b
}

// launch enqueues the conversion of n images from x to y on s.
func (c *conversion) launch(s cudadrv.Stream, x, y uintptr, n int) error {
	pixels := n * c.plane
	if pixels <= 0 || pixels > math.MaxInt32 {
		return fmt.Errorf("cuda: input conversion of %d pixels", pixels)
	}
	blocks := (pixels + convThreads - 1) / convThreads
	return c.fn.Launch(s, blocks, convThreads, 0, c.params(x, y, n))
}

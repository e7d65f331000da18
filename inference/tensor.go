package inference

import (
	"fmt"
	"math"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// Tensor is a dense tensor in row-major order. Inputs are [n, 3, H, W]
// (NCHW), float32 in Data, or image bytes in Bytes when Datatype is Uint8;
// logits are [n, classes] float32.
type Tensor struct {
	Shape []int
	Data  []float32
	// Datatype says which of Data and Bytes holds the values; the zero value
	// is Float32 (Data).
	Datatype Datatype
	Bytes    []uint8
	// Device, when not zero, holds an input's values in GPU memory instead
	// of Data or Bytes (both then nil): float32 values, or bytes when
	// Datatype is Uint8, in memory mapped with Server.OpenIPC (a client's
	// CUDA shared-memory region). Only a server whose back-end reads device
	// memory takes it (Server.DeviceIO).
	Device DeviceMemory
}

// DeviceMemory is a range of GPU memory the server did not allocate (see
// backend.DeviceMemory).
type DeviceMemory = backend.DeviceMemory

// Datatype is the element type of an input Tensor.
type Datatype int

const (
	// Float32 inputs are the model's input as is (Tensor.Data).
	Float32 Datatype = iota
	// Uint8 inputs are image bytes 0..255 (Tensor.Bytes), normalised per
	// channel with Config.Normalization: on the device when the back-end can
	// (cuda), on the host at Submit otherwise.
	Uint8
)

// String returns "fp32" or "uint8".
func (d Datatype) String() string {
	switch d {
	case Float32:
		return "fp32"
	case Uint8:
		return "uint8"
	}
	return fmt.Sprintf("Datatype(%d)", int(d))
}

// size is the bytes of one element.
func (d Datatype) size() int {
	if d == Uint8 {
		return 1
	}
	return 4
}

// ParseDatatype is the inverse of Datatype.String.
func ParseDatatype(s string) (Datatype, error) {
	switch s {
	case "fp32":
		return Float32, nil
	case "uint8":
		return Uint8, nil
	}
	return 0, fmt.Errorf("inference: unknown input datatype %q (want fp32 or uint8)", s)
}

// Normalization maps uint8 images to the model's float input (see
// backend.Normalization).
type Normalization = backend.Normalization

// ImageNet is torchvision's normalisation for ImageNet-trained models.
var ImageNet = backend.ImageNet

// values is the number of input elements t holds in host memory.
func (t *Tensor) values() int {
	if t.Datatype == Uint8 {
		return len(t.Bytes)
	}
	return len(t.Data)
}

// NewInput returns a zeroed input tensor of n images of DefaultChannels x h x w.
func NewInput(n, h, w int) Tensor {
	return Tensor{Shape: []int{n, DefaultChannels, h, w}, Data: make([]float32, n*DefaultChannels*h*w)}
}

// geometry is what a server accepts as input.
type geometry struct {
	channels, height, width int
	maxBatch                int
	rejectNonFinite         bool
}

// check returns an *InputError for an input the server cannot take (see
// InputError.Field for the order of the checks).
func (g *geometry) check(in *Tensor) error {
	if in.Datatype != Float32 && in.Datatype != Uint8 {
		return &InputError{Field: "datatype", Want: "fp32 or uint8", Got: in.Datatype.String()}
	}
	if in.Shape == nil && in.Data == nil && in.Bytes == nil && in.Device.IsZero() {
		return &InputError{Field: "input", Want: fmt.Sprintf("[n,%d,%d,%d] float32 tensor", g.channels, g.height, g.width), Got: "nil"}
	}
	if len(in.Shape) != 4 {
		return &InputError{Field: "rank", Want: fmt.Sprintf("4 ([n,%d,H,W])", g.channels), Got: fmt.Sprintf("%d (%v)", len(in.Shape), in.Shape)}
	}
	n, c, h, w := in.Shape[0], in.Shape[1], in.Shape[2], in.Shape[3]
	if c != g.channels {
		return &InputError{Field: "channels", Want: fmt.Sprint(g.channels), Got: fmt.Sprint(c)}
	}
	if h < resnet.MinSize || w < resnet.MinSize {
		return &InputError{Field: "height x width", Want: fmt.Sprintf("at least %dx%d (this server: %dx%d)", resnet.MinSize, resnet.MinSize, g.height, g.width), Got: fmt.Sprintf("%dx%d", h, w)}
	}
	if h != g.height {
		return &InputError{Field: "height", Want: fmt.Sprint(g.height), Got: fmt.Sprint(h)}
	}
	if w != g.width {
		return &InputError{Field: "width", Want: fmt.Sprint(g.width), Got: fmt.Sprint(w)}
	}
	if n < 1 || n > g.maxBatch {
		return &InputError{Field: "batch", Want: fmt.Sprintf("1..%d", g.maxBatch), Got: fmt.Sprint(n)}
	}
	if !in.Device.IsZero() {
		if in.Data != nil || in.Bytes != nil {
			return &InputError{Field: "data", Want: "values in Device or in Data/Bytes, not both", Got: "both"}
		}
		if want := n * c * h * w * in.Datatype.size(); in.Device.Bytes != want {
			return &InputError{Field: "data", Want: fmt.Sprintf("%d bytes of device memory for %s shape %v", want, in.Datatype, in.Shape), Got: fmt.Sprintf("%d bytes", in.Device.Bytes)}
		}
		if g.rejectNonFinite && in.Datatype == Float32 {
			return &InputError{Field: "value", Want: "host memory, whose values can be checked (Config.RejectNonFinite)", Got: "device memory"}
		}
		return nil
	}
	if want := n * c * h * w; in.values() != want {
		return &InputError{Field: "data", Want: fmt.Sprintf("%d values for shape %v", want, in.Shape), Got: fmt.Sprintf("%d values", in.values())}
	}
	if g.rejectNonFinite && in.Datatype == Float32 {
		for i, v := range in.Data {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return &InputError{Field: "value", Want: "finite values", Got: fmt.Sprintf("%v at index %d", v, i)}
			}
		}
	}
	return nil
}

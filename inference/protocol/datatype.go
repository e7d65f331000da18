package protocol

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/internal/half"
)

// The tensor datatypes the served model accepts as its input, by their
// protocol names. Every one is widened to float32 on the way in.
const (
	FP32  = "FP32"  // IEEE single precision, used as is
	FP16  = "FP16"  // IEEE half precision, widened exactly
	UINT8 = "UINT8" // image bytes 0..255, normalised per channel (see Normalization)
)

// elemSize is the size in bytes of one element of an input datatype, or 0 for
// a datatype the model does not accept.
func elemSize(datatype string) int {
	switch datatype {
	case FP32:
		return 4
	case FP16:
		return 2
	case UINT8:
		return 1
	}
	return 0
}

// Normalization maps UINT8 images to the model's float input, per channel:
// x = (v/255 - Mean[c]) / Std[c], as torchvision's ToTensor and Normalize do
// (in float32, step by step), so the logits equal those of images
// normalised by torchvision on the host. It is the server's type
// (inference.Normalization): the front door, the server's host widening and
// the cuda back-end's kernel compute the same values.
type Normalization = inference.Normalization

// ImageNet is torchvision's normalisation for ImageNet-trained models.
var ImageNet = inference.ImageNet

// widen converts the little-endian elements of datatype in src to float32 in
// dst (len(dst) elements; src holds exactly as many). UINT8 images [n,C,H,W]
// are normalised with lut (one table per channel), plane = H*W.
func widen(dst []float32, src []byte, datatype string, lut [][256]float32, plane int) {
	switch datatype {
	case FP32:
		if hostLittleEndian {
			copy(floatBytes(dst), src)
			return
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case FP16:
		for i := range dst {
			dst[i] = half.ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case UINT8:
		backend.Widen(dst, src[:len(dst)], lut, plane)
	}
}

// hostLittleEndian is whether float32 values in memory are laid out as the
// protocol's little-endian bytes, so they can be sent and received as is.
var hostLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// floatBytes returns the memory of v as bytes (little-endian hosts only).
func floatBytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// leBytes returns v as little-endian FP32 bytes: v's own memory on
// little-endian hosts, a converted copy elsewhere.
func leBytes(v []float32) []byte {
	if hostLittleEndian {
		return floatBytes(v)
	}
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

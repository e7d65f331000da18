//go:build cuda && linux && cgo

package cuda

import (
	"errors"
)

// convertInput enqueues the conversion of the input of p.n images to the
// network's input tensor on the compute stream, and returns where that tensor
// is:
//
//   - uint8 input is normalised by this package's kernel into w.x (fp16 or
//     TF32 networks: NHWC, or the space-to-depth input of the s2d stem) or
//     into the slot's float buffer src.f32 (fp32: NCHW);
//   - float32 input is converted to w.x by the kernel (a plain conversion)
//     when useInputKernel is set, else by cudnnTransformTensor, or read where
//     it is when the network takes fp32 NCHW.
func (w *worker) convertInput(p *plan, src inputRef) (uintptr, error) {
	net, k := w.e.net, w.dev.kernels
	if src.u8 != 0 {
		dst := src.f32
		if net.transform {
			dst = w.x
		}
		return dst, k.u8.launch(w.comp, src.u8, dst, p.n)
	}
	if !net.transform {
		return src.f32, nil
	}
	if w.e.inputKernel && k.f32Apply {
		return w.x, k.f32.launch(w.comp, src.f32, w.x, p.n)
	}
	if net.stem == stemS2D {
		return 0, errors.New("the space-to-depth stem takes its input from the input kernel, not cudnnTransformTensor")
	}
	return w.x, w.dnn.Transform(1, p.input, src.f32, 0, p.convs[0].x, w.x)
}

// useInputKernel is whether engines opened from now on convert float32 input
// with this package's kernel rather than cudnnTransformTensor (the benchmark
// BenchmarkWorker compares the two with input=fp32-cudnn).
var useInputKernel = true

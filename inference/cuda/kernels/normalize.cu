// Input conversion kernels of the cuda back-end: the request's NCHW images
// (uint8 bytes or float32 values) to the network's input tensor, normalised
// per channel. Compiled to PTX by go generate (see ../normalize.go); the PTX
// is embedded in the Go package and loaded with cuModuleLoadData.
//
// Every kernel runs one thread per pixel of one image and computes, for each
// channel c of that pixel,
//
//     y = (x / div - mean[c]) / std[c]
//
// in float32, one IEEE-rounded operation at a time (nvcc's default
// -prec-div=true, and no multiply that could contract into an FMA), so that a
// uint8 value gives bit for bit the float of the host's look-up table
// (protocol.Normalization: v/255, minus mean, divided by std). With div = 1,
// mean = 0 and std = 1 a float32 input passes through unchanged; half outputs
// are rounded to nearest even.

#include <cuda_fp16.h>

// MAXC is the most channels a conversion handles.
#define MAXC 4

// norm_params is passed by value, after the two pointers.
struct norm_params {
	float mean[MAXC];
	float std[MAXC];
	float div;
	int channels; // values per pixel, at most MAXC
	int plane;    // pixels per image (H*W)
	int pixels;   // pixels of the whole batch (images*plane)
};

__device__ __forceinline__ float norm_value(float x, const norm_params &p, int c) {
	float v = x / p.div;
	v = v - p.mean[c];
	return v / p.std[c];
}

__device__ __forceinline__ void store(float *y, size_t i, float v) { y[i] = v; }
__device__ __forceinline__ void store(__half *y, size_t i, float v) { y[i] = __float2half_rn(v); }

// convert_nhwc writes pixel i of every image as C consecutive values (NHWC).
template <typename In, typename Out>
__device__ void convert_nhwc(const In *x, Out *y, const norm_params &p) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= p.pixels) return;
	int n = i / p.plane, s = i - n * p.plane;
	size_t src = (size_t)n * p.channels * p.plane + s;
	size_t dst = (size_t)i * p.channels;
	for (int c = 0; c < p.channels; c++) {
		store(y, dst + c, norm_value((float)x[src + (size_t)c * p.plane], p, c));
	}
}

// convert_nchw keeps the NCHW layout.
template <typename In, typename Out>
__device__ void convert_nchw(const In *x, Out *y, const norm_params &p) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= p.pixels) return;
	int n = i / p.plane, s = i - n * p.plane;
	size_t at = (size_t)n * p.channels * p.plane + s;
	for (int c = 0; c < p.channels; c++) {
		size_t k = at + (size_t)c * p.plane;
		store(y, k, norm_value((float)x[k], p, c));
	}
}

extern "C" {
__global__ void norm_u8_nhwc_f16(const unsigned char *x, __half *y, norm_params p) { convert_nhwc(x, y, p); }
__global__ void norm_u8_nhwc_f32(const unsigned char *x, float *y, norm_params p) { convert_nhwc(x, y, p); }
__global__ void norm_u8_nchw_f32(const unsigned char *x, float *y, norm_params p) { convert_nchw(x, y, p); }
__global__ void norm_f32_nhwc_f16(const float *x, __half *y, norm_params p) { convert_nhwc(x, y, p); }
__global__ void norm_f32_nhwc_f32(const float *x, float *y, norm_params p) { convert_nhwc(x, y, p); }
}

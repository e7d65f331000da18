// Input conversion kernels of the cuda back-end: the request's NCHW images
// (uint8 bytes or float32 values, 3 channels) to the network's input tensor.
// Compiled to PTX by go generate (see ../normalize.go); the PTX is embedded in
// the Go package and loaded with cuModuleLoadData.
//
// Every thread converts pixels i, i + the grid's threads, ... (a grid-stride
// loop: the launch bounds its blocks, so that each block loads the uint8
// table into shared memory once for many pixels). A uint8 value v of
// channel c becomes table[c*256 + v]: the table is the host's
// (backend.Normalization.Table: (v/255 - mean[c]) / std[c] in float32), so
// the device's input is bit for bit the one the host would make. A float32
// value is converted as it is. Half outputs are rounded to nearest even.

#include <cuda_fp16.h>

// conv_params is passed by value, after the input and output pointers.
struct conv_params {
	const float *table; // uint8 kernels: 3 x 256 floats, channel by channel
	int plane;          // pixels per image (H*W)
	int pixels;         // pixels of the whole batch (images*plane)
};

__device__ __forceinline__ void store(float *y, size_t i, float v) { y[i] = v; }
__device__ __forceinline__ void store(__half *y, size_t i, float v) { y[i] = __float2half_rn(v); }

// loadTable copies the table into shared memory; every thread of the block
// must call it (it synchronises the block).
__device__ __forceinline__ void loadTable(float *t, const float *table) {
	for (int k = threadIdx.x; k < 3 * 256; k += blockDim.x) t[k] = table[k];
	__syncthreads();
}

// u8_value is the input value of byte v of channel c.
__device__ __forceinline__ float u8_value(const float *t, int c, unsigned char v) { return t[c * 256 + v]; }
__device__ __forceinline__ float f32_value(const float *, int, float v) { return v; }

// convert writes pixel i of the batch: NHWC (PITCH consecutive values, the
// 3 channels and PITCH - 3 zeros) or NCHW.
template <bool NHWC, int PITCH, typename In, typename Out>
__device__ __forceinline__ void convert(const In *x, Out *y, const conv_params &p, const float *t, int i,
                                        float (*value)(const float *, int, In)) {
	int n = i / p.plane, s = i - n * p.plane;
	size_t src = (size_t)n * 3 * p.plane + s;
	In v0 = x[src], v1 = x[src + p.plane], v2 = x[src + 2 * (size_t)p.plane];
	if (NHWC) {
		size_t dst = (size_t)i * PITCH;
		store(y, dst, value(t, 0, v0));
		store(y, dst + 1, value(t, 1, v1));
		store(y, dst + 2, value(t, 2, v2));
		for (int c = 3; c < PITCH; c++) store(y, dst + c, 0.0f);
	} else {
		store(y, src, value(t, 0, v0));
		store(y, src + p.plane, value(t, 1, v1));
		store(y, src + 2 * (size_t)p.plane, value(t, 2, v2));
	}
}

template <bool NHWC, int PITCH = 3, typename Out>
__device__ void from_u8(const unsigned char *x, Out *y, conv_params p) {
	__shared__ float t[3 * 256];
	loadTable(t, p.table);
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.pixels; i += gridDim.x * blockDim.x) {
		convert<NHWC, PITCH>(x, y, p, t, i, u8_value);
	}
}

template <bool NHWC, int PITCH = 3, typename Out>
__device__ void from_f32(const float *x, Out *y, conv_params p) {
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.pixels; i += gridDim.x * blockDim.x) {
		convert<NHWC, PITCH>(x, y, p, (const float *)0, i, f32_value);
	}
}

extern "C" {
__global__ void norm_u8_nhwc_f16(const unsigned char *x, __half *y, conv_params p) { from_u8<true>(x, y, p); }
__global__ void norm_u8_nhwc_f32(const unsigned char *x, float *y, conv_params p) { from_u8<true>(x, y, p); }
__global__ void norm_u8_nchw_f32(const unsigned char *x, float *y, conv_params p) { from_u8<false>(x, y, p); }
__global__ void norm_f32_nhwc_f16(const float *x, __half *y, conv_params p) { from_f32<true>(x, y, p); }
__global__ void norm_f32_nhwc_f32(const float *x, float *y, conv_params p) { from_f32<true>(x, y, p); }
// The padded stem's input (INFERBENCH_CUDA_PAD_STEM): 16 bytes a pixel, the
// channels after the third zero.
__global__ void norm_u8_nhwc8_f16(const unsigned char *x, __half *y, conv_params p) { from_u8<true, 8>(x, y, p); }
__global__ void norm_f32_nhwc8_f16(const float *x, __half *y, conv_params p) { from_f32<true, 8>(x, y, p); }
__global__ void norm_u8_nhwc4_f32(const unsigned char *x, float *y, conv_params p) { from_u8<true, 4>(x, y, p); }
__global__ void norm_f32_nhwc4_f32(const float *x, float *y, conv_params p) { from_f32<true, 4>(x, y, p); }
}

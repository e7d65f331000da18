// Input conversion kernels of the cuda back-end: the request's NCHW images
// (uint8 bytes or float32 values, 3 channels) to the network's input tensor:
// the image in NHWC or NCHW, or its space-to-depth form for the s2d stem.
// Compiled to a fat binary by go generate (see ../normalize.go), embedded in
// the Go package and loaded with cuModuleLoadData.
//
// Every thread converts output pixels i, i + the grid's threads, ... (a
// grid-stride loop: the launch bounds its blocks, so that each block loads
// the uint8 table into shared memory once for many pixels). A uint8 value v of
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

// convert writes pixel i of the batch: NHWC (3 consecutive values) or NCHW.
template <bool NHWC, typename In, typename Out>
__device__ __forceinline__ void convert(const In *x, Out *y, const conv_params &p, const float *t, int i,
                                        float (*value)(const float *, int, In)) {
	int n = i / p.plane, s = i - n * p.plane;
	size_t src = (size_t)n * 3 * p.plane + s;
	In v0 = x[src], v1 = x[src + p.plane], v2 = x[src + 2 * (size_t)p.plane];
	if (NHWC) {
		size_t dst = (size_t)i * 3;
		store(y, dst, value(t, 0, v0));
		store(y, dst + 1, value(t, 1, v1));
		store(y, dst + 2, value(t, 2, v2));
	} else {
		store(y, src, value(t, 0, v0));
		store(y, src + p.plane, value(t, 1, v1));
		store(y, src + 2 * (size_t)p.plane, value(t, 2, v2));
	}
}

template <bool NHWC, typename Out>
__device__ void from_u8(const unsigned char *x, Out *y, conv_params p) {
	__shared__ float t[3 * 256];
	loadTable(t, p.table);
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.pixels; i += gridDim.x * blockDim.x) {
		convert<NHWC>(x, y, p, t, i, u8_value);
	}
}

template <bool NHWC, typename Out>
__device__ void from_f32(const float *x, Out *y, conv_params p) {
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.pixels; i += gridDim.x * blockDim.x) {
		convert<NHWC>(x, y, p, (const float *)0, i, f32_value);
	}
}

// s2d_params is passed by value, after the input and output pointers, to the
// space-to-depth kernels.
struct s2d_params {
	const float *table; // uint8 kernels: as conv_params.table
	int height, width;  // the image's
	int rows, cols;     // the space-to-depth input's
	int pad;            // the stem's padding: image row r is row r + pad of the padded image
	int pixels;         // of the whole batch's space-to-depth input (images*rows*cols)
};

// pack2 is a and b rounded to half (nearest even), a in the low 16 bits.
__device__ __forceinline__ unsigned pack2(float a, float b) {
	return (unsigned)__half_as_ushort(__float2half_rn(a)) | (unsigned)__half_as_ushort(__float2half_rn(b)) << 16;
}

// store16 writes the 16 values of one space-to-depth pixel with vector stores
// (y is 32-byte aligned for half, 64-byte for float).
__device__ __forceinline__ void store16(__half *y, const float *v) {
	uint4 *o = reinterpret_cast<uint4 *>(y);
	o[0] = make_uint4(pack2(v[0], v[1]), pack2(v[2], v[3]), pack2(v[4], v[5]), pack2(v[6], v[7]));
	o[1] = make_uint4(pack2(v[8], v[9]), pack2(v[10], v[11]), pack2(v[12], v[13]), pack2(v[14], v[15]));
}
__device__ __forceinline__ void store16(float *y, const float *v) {
	float4 *o = reinterpret_cast<float4 *>(y);
	for (int k = 0; k < 4; k++) o[k] = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
}

// space_to_depth writes pixel i (image n, row Y, column X) of the batch's
// space-to-depth input, 16 values: for dy, dx in {0, 1}, values
// (dy*2+dx)*3 + ch hold channel ch of the image at row 2Y+dy-pad, column
// 2X+dx-pad, or 0 outside the image (the stem's zero padding, after
// normalisation); values 12 to 15 are 0. See ../stem.go.
template <typename In, typename Out>
__device__ __forceinline__ void space_to_depth(const In *x, Out *y, const s2d_params &p, const float *t, int i,
                                               float (*value)(const float *, int, In)) {
	int per = p.rows * p.cols;
	int n = i / per, r = i - n * per;
	int Y = r / p.cols, X = r - Y * p.cols;
	size_t plane = (size_t)p.height * p.width;
	const In *img = x + (size_t)n * 3 * plane;
	float v[16];
#pragma unroll
	for (int d = 0; d < 4; d++) {
		int row = 2 * Y + (d >> 1) - p.pad, col = 2 * X + (d & 1) - p.pad;
		if (row >= 0 && row < p.height && col >= 0 && col < p.width) {
			const In *at = img + (size_t)row * p.width + col;
#pragma unroll
			for (int ch = 0; ch < 3; ch++) v[d * 3 + ch] = value(t, ch, at[ch * plane]);
		} else {
#pragma unroll
			for (int ch = 0; ch < 3; ch++) v[d * 3 + ch] = 0.0f;
		}
	}
#pragma unroll
	for (int c = 12; c < 16; c++) v[c] = 0.0f;
	store16(y + (size_t)i * 16, v);
}

template <typename Out>
__device__ void s2d_from_u8(const unsigned char *x, Out *y, s2d_params p) {
	__shared__ float t[3 * 256];
	loadTable(t, p.table);
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.pixels; i += gridDim.x * blockDim.x) {
		space_to_depth(x, y, p, t, i, u8_value);
	}
}

template <typename Out>
__device__ void s2d_from_f32(const float *x, Out *y, s2d_params p) {
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.pixels; i += gridDim.x * blockDim.x) {
		space_to_depth(x, y, p, (const float *)0, i, f32_value);
	}
}

extern "C" {
__global__ void norm_u8_nhwc_f16(const unsigned char *x, __half *y, conv_params p) { from_u8<true>(x, y, p); }
__global__ void norm_u8_nhwc_f32(const unsigned char *x, float *y, conv_params p) { from_u8<true>(x, y, p); }
__global__ void norm_u8_nchw_f32(const unsigned char *x, float *y, conv_params p) { from_u8<false>(x, y, p); }
__global__ void norm_f32_nhwc_f16(const float *x, __half *y, conv_params p) { from_f32<true>(x, y, p); }
__global__ void norm_f32_nhwc_f32(const float *x, float *y, conv_params p) { from_f32<true>(x, y, p); }
// The space-to-depth stem's input (stem.go's s2d form), NHWC, 16
// values a pixel.
__global__ void norm_u8_s2d_f16(const unsigned char *x, __half *y, s2d_params p) { s2d_from_u8(x, y, p); }
__global__ void norm_u8_s2d_f32(const unsigned char *x, float *y, s2d_params p) { s2d_from_u8(x, y, p); }
__global__ void norm_f32_s2d_f16(const float *x, __half *y, s2d_params p) { s2d_from_f32(x, y, p); }
__global__ void norm_f32_s2d_f32(const float *x, float *y, s2d_params p) { s2d_from_f32(x, y, p); }
}

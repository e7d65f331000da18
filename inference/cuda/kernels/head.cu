// Classifier head kernels of the cuda back-end: the global average pool of
// the last stage's activations, then the fully connected layer with its bias,
// both in float32 arithmetic. Compiled to a fat binary by go generate (see
// ../head.go) and loaded with the input conversion kernels.
//
// gap_<layout>_<type> averages each channel of each image over its plane:
// feat[i*c + ch] = (sum over p of x[image i, channel ch, pixel p]) / plane,
// the sum in pixel order, one thread per (image, channel).
//
// fc_* compute out[i*classes + j] = bias[j] + sum over k of feat[i*f + k] *
// w[j*f + k] (w is the classifier's weight, classes x f, row-major; out is
// the logits, images x classes, row-major) with fused multiply-adds in an
// order fixed by the kernel, so that a kernel always gives the same bits.
// fc_rows gives a warp to a class and runs through the images: for a few
// images. fc_tile_<TI>x<TJ> gives a block a tile of TI images and
// TJ classes (block b: image tile b / class tiles, class tile b % class
// tiles), staged through shared memory 32 k at a time, each thread computing
// 4 images x 4 classes: for more.

#include <cuda_fp16.h>

__device__ __forceinline__ float load(const float *x, size_t i) { return x[i]; }
__device__ __forceinline__ float load(const __half *x, size_t i) { return __half2float(x[i]); }

template <typename T, bool nhwc>
__device__ __forceinline__ void gap(const T *x, float *feat, int n, int c, int plane) {
	int k = blockIdx.x * blockDim.x + threadIdx.x;
	if (k >= n * c) return;
	int i = k / c, ch = k % c;
	float s = 0.0f;
	if (nhwc) {
		const T *p = x + (size_t)i * plane * c + ch;
		for (int q = 0; q < plane; q++) s += load(p, (size_t)q * c);
	} else {
		const T *p = x + (size_t)k * plane;
		for (int q = 0; q < plane; q++) s += load(p, q);
	}
	feat[k] = s / (float)plane;
}

extern "C" __global__ void gap_nhwc_f16(const __half *x, float *feat, int n, int c, int plane) { gap<__half, true>(x, feat, n, c, plane); }
extern "C" __global__ void gap_nhwc_f32(const float *x, float *feat, int n, int c, int plane) { gap<float, true>(x, feat, n, c, plane); }
extern "C" __global__ void gap_nchw_f32(const float *x, float *feat, int n, int c, int plane) { gap<float, false>(x, feat, n, c, plane); }

// fc_rows: block of 128 threads, 4 warps, warp w of block b takes class
// 4b + w. Lane l holds w[j][l + 32m] for m < f/32 (f a multiple of 32, at
// most 32*maxPerLane) and, per image, sums its products in ascending m, then
// the warp adds its lanes' sums in a fixed tree.
#define maxPerLane 32
extern "C" __global__ void __launch_bounds__(128) fc_rows(const float *feat, const float *w, const float *bias, float *out, int n, int f, int classes) {
	int j = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
	if (j >= classes) return;
	int per = f / 32;
	float wr[maxPerLane];
#pragma unroll
	for (int m = 0; m < maxPerLane; m++) wr[m] = m < per ? w[(size_t)j * f + lane + 32 * m] : 0.0f;
	for (int i = 0; i < n; i++) {
		const float *x = feat + (size_t)i * f + lane;
		float s = 0.0f;
#pragma unroll
		for (int m = 0; m < maxPerLane; m++)
			if (m < per) s = fmaf(x[32 * m], wr[m], s);
#pragma unroll
		for (int d = 16; d > 0; d /= 2) s += __shfl_xor_sync(0xffffffffu, s, d);
		if (lane == 0) out[(size_t)i * classes + j] = s + bias[j];
	}
}

// fc_tile: a block of THREADS = TI*TJ/16 threads computes TI images x TJ
// classes, thread t the 4 images 4*(t / (TJ/4)) + 0..3 and the 4 classes
// 4*(t % (TJ/4)) + 0..3 of the tile. The k dimension goes through shared
// memory TK at a time, each thread loading its part of the next chunk into
// registers (float4s along k, read as one load when f is a multiple of 4)
// while it computes the current one.
#define TK 32
template <int TI, int TJ>
__device__ __forceinline__ void fc_tile(const float *feat, const float *w, const float *bias, float *out, int n, int f, int classes) {
	const int threads = TI * TJ / 16;
	const int la = TI * TK / 4 / threads, lb = TJ * TK / 4 / threads; // float4 loads per thread per chunk
	__shared__ __align__(16) float a[TK][TI + 4]; // feat chunk, k by image
	__shared__ __align__(16) float b[TK][TJ + 4]; // weight chunk, k by class
	int tiles = (classes + TJ - 1) / TJ;          // class tiles; the grid is image tiles x class tiles
	int i0 = (blockIdx.x / tiles) * TI, j0 = (blockIdx.x % tiles) * TJ;
	int t = threadIdx.x, tx = t % (TJ / 4), ty = t / (TJ / 4);
	float4 ra[la], rb[lb];
	const bool vec = (f & 3) == 0; // rows of 16-byte multiples: float4 loads
	// quad returns row[k .. k+3] of a row of f, zeros past its end.
	auto quad = [&](const float *row, int k) {
		if (vec && k < f) return *(const float4 *)(row + k);
		return make_float4(k < f ? row[k] : 0.0f, k + 1 < f ? row[k + 1] : 0.0f, k + 2 < f ? row[k + 2] : 0.0f, k + 3 < f ? row[k + 3] : 0.0f);
	};
	// Element e of a chunk's float4s: row e / (TK/4) of the tile, k offset 4 * (e % (TK/4)).
	auto fetch = [&](int k0) {
#pragma unroll
		for (int m = 0; m < la; m++) {
			int e = t + threads * m, i = i0 + e / (TK / 4), k = k0 + 4 * (e % (TK / 4));
			ra[m] = i < n ? quad(feat + (size_t)i * f, k) : make_float4(0, 0, 0, 0);
		}
#pragma unroll
		for (int m = 0; m < lb; m++) {
			int e = t + threads * m, j = j0 + e / (TK / 4), k = k0 + 4 * (e % (TK / 4));
			rb[m] = j < classes ? quad(w + (size_t)j * f, k) : make_float4(0, 0, 0, 0);
		}
	};
	float acc[4][4];
#pragma unroll
	for (int r = 0; r < 4; r++)
#pragma unroll
		for (int q = 0; q < 4; q++) acc[r][q] = 0.0f;
	fetch(0);
	for (int k0 = 0; k0 < f; k0 += TK) {
#pragma unroll
		for (int m = 0; m < la; m++) {
			int e = t + threads * m, ii = e / (TK / 4), kk = 4 * (e % (TK / 4));
			a[kk][ii] = ra[m].x, a[kk + 1][ii] = ra[m].y, a[kk + 2][ii] = ra[m].z, a[kk + 3][ii] = ra[m].w;
		}
#pragma unroll
		for (int m = 0; m < lb; m++) {
			int e = t + threads * m, jj = e / (TK / 4), kk = 4 * (e % (TK / 4));
			b[kk][jj] = rb[m].x, b[kk + 1][jj] = rb[m].y, b[kk + 2][jj] = rb[m].z, b[kk + 3][jj] = rb[m].w;
		}
		__syncthreads();
		if (k0 + TK < f) fetch(k0 + TK);
#pragma unroll
		for (int kk = 0; kk < TK; kk++) {
			float4 av = *(const float4 *)&a[kk][4 * ty], bv = *(const float4 *)&b[kk][4 * tx];
			float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
			for (int r = 0; r < 4; r++)
#pragma unroll
				for (int q = 0; q < 4; q++) acc[r][q] = fmaf(ar[r], br[q], acc[r][q]);
		}
		__syncthreads();
	}
#pragma unroll
	for (int r = 0; r < 4; r++) {
		int i = i0 + 4 * ty + r;
#pragma unroll
		for (int q = 0; q < 4; q++) {
			int j = j0 + 4 * tx + q;
			if (i < n && j < classes) out[(size_t)i * classes + j] = acc[r][q] + bias[j];
		}
	}
}

extern "C" __global__ void __launch_bounds__(32) fc_tile_16x32(const float *feat, const float *w, const float *bias, float *out, int n, int f, int classes) {
	fc_tile<16, 32>(feat, w, bias, out, n, f, classes);
}
extern "C" __global__ void __launch_bounds__(128) fc_tile_32x64(const float *feat, const float *w, const float *bias, float *out, int n, int f, int classes) {
	fc_tile<32, 64>(feat, w, bias, out, n, f, classes);
}

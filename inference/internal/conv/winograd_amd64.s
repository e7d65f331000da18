#include "textflag.h"

// Winograd F(2x2, 3x3) transforms with AVX-512, 16 channels a register.

// func winogradInAVX512(dst *float32, stride int, src *float32, row, pix, n int)
//
// For each group of 16 channels: loads the 4x4 input block d (pixel (r, c)
// at src + r*row + c*pix), computes V = Bᵀ d B and stores position ξ at
// dst + ξ*stride. Strides are in bytes; n is a multiple of 16.
TEXT ·winogradInAVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), R8
	MOVQ src+16(FP), R9
	MOVQ row+24(FP), DX
	MOVQ pix+32(FP), CX
	MOVQ n+40(FP), AX
	SHRQ $4, AX
	LEAQ (CX)(CX*2), BX // 3*pix
	LEAQ (R9)(DX*1), R10
	LEAQ (R9)(DX*2), R11
	LEAQ (R10)(DX*2), R12

in_loop:
	// d[r][c] in Z(4r+c).
	VMOVUPS (R9), Z0
	VMOVUPS (R9)(CX*1), Z1
	VMOVUPS (R9)(CX*2), Z2
	VMOVUPS (R9)(BX*1), Z3
	VMOVUPS (R10), Z4
	VMOVUPS (R10)(CX*1), Z5
	VMOVUPS (R10)(CX*2), Z6
	VMOVUPS (R10)(BX*1), Z7
	VMOVUPS (R11), Z8
	VMOVUPS (R11)(CX*1), Z9
	VMOVUPS (R11)(CX*2), Z10
	VMOVUPS (R11)(BX*1), Z11
	VMOVUPS (R12), Z12
	VMOVUPS (R12)(CX*1), Z13
	VMOVUPS (R12)(CX*2), Z14
	VMOVUPS (R12)(BX*1), Z15

	// t = Bᵀ d: t[0] = d0-d2, t[1] = d1+d2, t[2] = d2-d1, t[3] = d1-d3, in
	// Z(16+4r+c).
	VSUBPS Z8, Z0, Z16
	VSUBPS Z9, Z1, Z17
	VSUBPS Z10, Z2, Z18
	VSUBPS Z11, Z3, Z19
	VADDPS Z8, Z4, Z20
	VADDPS Z9, Z5, Z21
	VADDPS Z10, Z6, Z22
	VADDPS Z11, Z7, Z23
	VSUBPS Z4, Z8, Z24
	VSUBPS Z5, Z9, Z25
	VSUBPS Z6, Z10, Z26
	VSUBPS Z7, Z11, Z27
	VSUBPS Z12, Z4, Z28
	VSUBPS Z13, Z5, Z29
	VSUBPS Z14, Z6, Z30
	VSUBPS Z15, Z7, Z31

	// V = t B, row by row: v0 = t0-t2, v1 = t1+t2, v2 = t2-t1, v3 = t1-t3,
	// stored at positions 4r..4r+3.
	MOVQ DI, R13
#define ROW(A, B, C, D) \
	VSUBPS C, A, Z0; \
	VADDPS C, B, Z1; \
	VSUBPS B, C, Z2; \
	VSUBPS D, B, Z3; \
	VMOVUPS Z0, (R13); \
	ADDQ R8, R13; \
	VMOVUPS Z1, (R13); \
	ADDQ R8, R13; \
	VMOVUPS Z2, (R13); \
	ADDQ R8, R13; \
	VMOVUPS Z3, (R13); \
	ADDQ R8, R13
	ROW(Z16, Z17, Z18, Z19)
	ROW(Z20, Z21, Z22, Z23)
	ROW(Z24, Z25, Z26, Z27)
	ROW(Z28, Z29, Z30, Z31)
#undef ROW

	ADDQ $64, DI
	ADDQ $64, R9
	ADDQ $64, R10
	ADDQ $64, R11
	ADDQ $64, R12
	DECQ AX
	JNZ  in_loop
	VZEROUPPER
	RET

// func winogradOutAVX512(dst *float32, row, pix int, src *float32, stride int, bias, res *float32, n int)
//
// For each group of 16 channels: loads position ξ of the tile's products
// from src + ξ*stride, computes Y = Aᵀ m A, adds the bias and, if res is
// not nil, the residual (laid out as dst), clamps at zero if relu, and
// stores Y[r][c] at dst + r*row + c*pix. Strides in bytes; n a multiple of
// 16. The ReLU is the sign bit of n: n < 0 means -n channels with ReLU.
TEXT ·winogradOutAVX512(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ row+8(FP), DX
	MOVQ pix+16(FP), CX
	MOVQ src+24(FP), SI
	MOVQ stride+32(FP), R8
	MOVQ bias+40(FP), BX
	MOVQ res+48(FP), R9
	MOVQ n+56(FP), AX
	XORQ R12, R12 // 1: ReLU
	TESTQ AX, AX
	JNS  out_pos
	NEGQ AX
	MOVQ $1, R12

out_pos:
	SHRQ $4, AX
	VPXORD Z31, Z31, Z31

out_loop:
	MOVQ SI, R13
	VMOVUPS (R13), Z0
	ADDQ R8, R13
	VMOVUPS (R13), Z1
	ADDQ R8, R13
	VMOVUPS (R13), Z2
	ADDQ R8, R13
	VMOVUPS (R13), Z3
	ADDQ R8, R13
	VMOVUPS (R13), Z4
	ADDQ R8, R13
	VMOVUPS (R13), Z5
	ADDQ R8, R13
	VMOVUPS (R13), Z6
	ADDQ R8, R13
	VMOVUPS (R13), Z7
	ADDQ R8, R13
	VMOVUPS (R13), Z8
	ADDQ R8, R13
	VMOVUPS (R13), Z9
	ADDQ R8, R13
	VMOVUPS (R13), Z10
	ADDQ R8, R13
	VMOVUPS (R13), Z11
	ADDQ R8, R13
	VMOVUPS (R13), Z12
	ADDQ R8, R13
	VMOVUPS (R13), Z13
	ADDQ R8, R13
	VMOVUPS (R13), Z14
	ADDQ R8, R13
	VMOVUPS (R13), Z15

	// t = Aᵀ m: t0 = m0+m1+m2 (Z16-Z19), t1 = m1-m2-m3 (Z20-Z23), by column.
	VADDPS Z4, Z0, Z16
	VADDPS Z8, Z16, Z16
	VADDPS Z5, Z1, Z17
	VADDPS Z9, Z17, Z17
	VADDPS Z6, Z2, Z18
	VADDPS Z10, Z18, Z18
	VADDPS Z7, Z3, Z19
	VADDPS Z11, Z19, Z19
	VSUBPS Z8, Z4, Z20
	VSUBPS Z12, Z20, Z20
	VSUBPS Z9, Z5, Z21
	VSUBPS Z13, Z21, Z21
	VSUBPS Z10, Z6, Z22
	VSUBPS Z14, Z22, Z22
	VSUBPS Z11, Z7, Z23
	VSUBPS Z15, Z23, Z23

	// Y = t A: y0 = t0+t1+t2, y1 = t1-t2-t3, per row; plus the bias.
	VMOVUPS (BX), Z30
	VADDPS Z17, Z16, Z24
	VADDPS Z18, Z24, Z24
	VSUBPS Z18, Z17, Z25
	VSUBPS Z19, Z25, Z25
	VADDPS Z21, Z20, Z26
	VADDPS Z22, Z26, Z26
	VSUBPS Z22, Z21, Z27
	VSUBPS Z23, Z27, Z27
	VADDPS Z30, Z24, Z24
	VADDPS Z30, Z25, Z25
	VADDPS Z30, Z26, Z26
	VADDPS Z30, Z27, Z27

	TESTQ R9, R9
	JZ    out_nores
	LEAQ  (R9)(DX*1), R10
	VADDPS (R9), Z24, Z24
	VADDPS (R9)(CX*1), Z25, Z25
	VADDPS (R10), Z26, Z26
	VADDPS (R10)(CX*1), Z27, Z27
	ADDQ  $64, R9

out_nores:
	TESTQ R12, R12
	JZ    out_store
	VMAXPS Z31, Z24, Z24
	VMAXPS Z31, Z25, Z25
	VMAXPS Z31, Z26, Z26
	VMAXPS Z31, Z27, Z27

out_store:
	LEAQ    (DI)(DX*1), R10
	VMOVUPS Z24, (DI)
	VMOVUPS Z25, (DI)(CX*1)
	VMOVUPS Z26, (R10)
	VMOVUPS Z27, (R10)(CX*1)

	ADDQ $64, DI
	ADDQ $64, SI
	ADDQ $64, BX
	DECQ AX
	JNZ  out_loop
	VZEROUPPER
	RET

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

// The same transforms with AVX2, 8 channels a register. Sixteen registers
// do not hold a whole 4x4 block as the AVX-512 version does, so a row of
// t (input) or a column pair of t (output) is made at a time, reading the
// block from memory as it goes (it is in the L1 cache after the first
// read); the additions are the same, in the same order.

// func winogradInAVX2(dst *float32, stride int, src *float32, row, pix, n int)
TEXT ·winogradInAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), R8
	MOVQ src+16(FP), R9
	MOVQ row+24(FP), DX
	MOVQ pix+32(FP), CX
	MOVQ n+40(FP), AX
	SHRQ $3, AX
	LEAQ (CX)(CX*2), BX // 3*pix
	LEAQ (R9)(DX*1), R10
	LEAQ (R9)(DX*2), R11
	LEAQ (R10)(DX*2), R12

in2_loop:
	MOVQ DI, R13

// TROW makes row r of t = Bᵀ d in Y0-Y3 (column c in Yc) as L OP O, L and O
// the rows of d it combines, then stores row r of V = t B at the next four
// positions.
#define TROW(L, OP, O) \
	VMOVUPS (L), Y0; \
	OP      (O), Y0, Y0; \
	VMOVUPS (L)(CX*1), Y1; \
	OP      (O)(CX*1), Y1, Y1; \
	VMOVUPS (L)(CX*2), Y2; \
	OP      (O)(CX*2), Y2, Y2; \
	VMOVUPS (L)(BX*1), Y3; \
	OP      (O)(BX*1), Y3, Y3; \
	VSUBPS  Y2, Y0, Y4; \
	VADDPS  Y2, Y1, Y5; \
	VSUBPS  Y1, Y2, Y6; \
	VSUBPS  Y3, Y1, Y7; \
	VMOVUPS Y4, (R13); \
	ADDQ    R8, R13; \
	VMOVUPS Y5, (R13); \
	ADDQ    R8, R13; \
	VMOVUPS Y6, (R13); \
	ADDQ    R8, R13; \
	VMOVUPS Y7, (R13); \
	ADDQ    R8, R13
	TROW(R9, VSUBPS, R11)  // t0 = d0 - d2
	TROW(R10, VADDPS, R11) // t1 = d1 + d2
	TROW(R11, VSUBPS, R10) // t2 = d2 - d1
	TROW(R10, VSUBPS, R12) // t3 = d1 - d3
#undef TROW

	ADDQ $32, DI
	ADDQ $32, R9
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R12
	DECQ AX
	JNZ  in2_loop
	VZEROUPPER
	RET

// func winogradOutAVX2(dst *float32, row, pix int, src *float32, stride int, bias, res *float32, n int)
TEXT ·winogradOutAVX2(SB), NOSPLIT, $0-64
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
	JNS  out2_pos
	NEGQ AX
	MOVQ $1, R12

out2_pos:
	SHRQ $3, AX
	LEAQ (R8)(R8*2), R10 // 3*stride: m3c is at 4*R10 past m0c
	MOVQ R8, R11
	SHLQ $2, R11         // 4*stride: from m_rc to m_(r+1)c
	VPXOR Y15, Y15, Y15

out2_loop:
	// t = Aᵀ m by column c (position c of row 0 at SI + c*stride):
	// t0c = m0c+m1c+m2c in Yc, t1c = m1c-m2c-m3c in Y(4+c).
	MOVQ SI, R13
#define TCOL(A, B) \
	VMOVUPS (R13), A; \
	VADDPS  (R13)(R11*1), A, A; \
	VADDPS  (R13)(R11*2), A, A; \
	VMOVUPS (R13)(R11*1), B; \
	VSUBPS  (R13)(R11*2), B, B; \
	VSUBPS  (R13)(R10*4), B, B; \
	ADDQ    R8, R13
	TCOL(Y0, Y4)
	TCOL(Y1, Y5)
	TCOL(Y2, Y6)
	TCOL(Y3, Y7)
#undef TCOL

	// Y = t A: y0 = t0+t1+t2, y1 = t1-t2-t3, per row; plus the bias.
	VMOVUPS (BX), Y12
	VADDPS Y1, Y0, Y8
	VADDPS Y2, Y8, Y8
	VSUBPS Y2, Y1, Y9
	VSUBPS Y3, Y9, Y9
	VADDPS Y5, Y4, Y10
	VADDPS Y6, Y10, Y10
	VSUBPS Y6, Y5, Y11
	VSUBPS Y7, Y11, Y11
	VADDPS Y12, Y8, Y8
	VADDPS Y12, Y9, Y9
	VADDPS Y12, Y10, Y10
	VADDPS Y12, Y11, Y11

	TESTQ R9, R9
	JZ    out2_nores
	LEAQ  (R9)(DX*1), R13
	VADDPS (R9), Y8, Y8
	VADDPS (R9)(CX*1), Y9, Y9
	VADDPS (R13), Y10, Y10
	VADDPS (R13)(CX*1), Y11, Y11
	ADDQ  $32, R9

out2_nores:
	TESTQ R12, R12
	JZ    out2_store
	VMAXPS Y15, Y8, Y8
	VMAXPS Y15, Y9, Y9
	VMAXPS Y15, Y10, Y10
	VMAXPS Y15, Y11, Y11

out2_store:
	LEAQ    (DI)(DX*1), R13
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(CX*1)
	VMOVUPS Y10, (R13)
	VMOVUPS Y11, (R13)(CX*1)

	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, BX
	DECQ AX
	JNZ  out2_loop
	VZEROUPPER
	RET

#include "textflag.h"

// Winograd's F(4x4, 3x3) transforms in AVX2, 8 channels a register; see
// winograd4.go for the matrices and the Go transforms these match to the
// bit (the same operations in the same order, no fused multiply-adds).

// BT computes o = Bᵀ x for x0..x5 in Y0-Y5 into Y6-Y11, with 4 in Y14 and
// 5 in Y15 (Y12, Y13 scratch):
//   o0 = (4x0 + x4) - 5x2      o3 = (x4 - x2) + 2(x3 - x1)
//   o1 = (x4 - 4x2) + (x3 - 4x1)   o4 = (x4 - x2) - 2(x3 - x1)
//   o2 = (x4 - 4x2) - (x3 - 4x1)   o5 = (4x1 + x5) - 5x3
#define BT \
	VMULPS Y14, Y2, Y12; \
	VSUBPS Y12, Y4, Y12; \
	VMULPS Y14, Y1, Y13; \
	VSUBPS Y13, Y3, Y13; \
	VADDPS Y13, Y12, Y7; \
	VSUBPS Y13, Y12, Y8; \
	VSUBPS Y2, Y4, Y12; \
	VSUBPS Y1, Y3, Y13; \
	VADDPS Y13, Y13, Y13; \
	VADDPS Y13, Y12, Y9; \
	VSUBPS Y13, Y12, Y10; \
	VMULPS Y14, Y0, Y6; \
	VADDPS Y4, Y6, Y6; \
	VMULPS Y15, Y2, Y12; \
	VSUBPS Y12, Y6, Y6; \
	VMULPS Y14, Y1, Y11; \
	VADDPS Y5, Y11, Y11; \
	VMULPS Y15, Y3, Y12; \
	VSUBPS Y12, Y11, Y11

// LOAD6 loads x0..x5 into Y0-Y5 from (A), (A)(S*1), (A)(S*2), (B),
// (B)(S*1), (B)(S*2).
#define LOAD6(A, B, S) \
	VMOVUPS (A), Y0; \
	VMOVUPS (A)(S*1), Y1; \
	VMOVUPS (A)(S*2), Y2; \
	VMOVUPS (B), Y3; \
	VMOVUPS (B)(S*1), Y4; \
	VMOVUPS (B)(S*2), Y5

// STORE6 stores Y6-Y11 at the same six places.
#define STORE6(A, B, S) \
	VMOVUPS Y6, (A); \
	VMOVUPS Y7, (A)(S*1); \
	VMOVUPS Y8, (A)(S*2); \
	VMOVUPS Y9, (B); \
	VMOVUPS Y10, (B)(S*1); \
	VMOVUPS Y11, (B)(S*2)

DATA wino4const<>+0(SB)/4, $4.0
DATA wino4const<>+4(SB)/4, $5.0
DATA wino4const<>+8(SB)/4, $8.0
GLOBL wino4const<>(SB), RODATA|NOPTR, $12

// func winograd4InAVX2(dst *float32, stride int, src *float32, row, pix, n int)
//
// Pass 1 writes t = Bᵀ d column by column into dst (t[r][c] at position
// 6r+c), pass 2 reads each row of t back and writes V = t B over it.
TEXT ·winograd4InAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ row+24(FP), DX
	MOVQ pix+32(FP), CX
	MOVQ n+40(FP), AX
	SHRQ $3, AX
	VBROADCASTSS wino4const<>+0(SB), Y14
	VBROADCASTSS wino4const<>+4(SB), Y15
	LEAQ (DX)(DX*2), BX    // 3*row
	LEAQ (R8)(R8*2), R14
	ADDQ R14, R14          // 6*stride
	LEAQ (R14)(R14*2), R12 // 18*stride: rows 3-5 of t

in4_loop:
	// Pass 1: column c of d at SI + c*pix, its rows row apart; column c
	// of t at DI + c*stride, its rows 6*stride apart.
	MOVQ SI, R9
	LEAQ (SI)(BX*1), R10
	MOVQ DI, R11
	LEAQ (DI)(R12*1), R13
	MOVQ $6, R15

in4_col:
	LOAD6(R9, R10, DX)
	BT
	STORE6(R11, R13, R14)
	ADDQ CX, R9
	ADDQ CX, R10
	ADDQ R8, R11
	ADDQ R8, R13
	DECQ R15
	JNZ  in4_col

	// Pass 2: row r of t at DI + 6r*stride, its columns stride apart.
	MOVQ DI, R11
	LEAQ (R8)(R8*2), R13
	ADDQ DI, R13
	MOVQ $6, R15

in4_row:
	LOAD6(R11, R13, R8)
	BT
	STORE6(R11, R13, R8)
	ADDQ R14, R11
	ADDQ R14, R13
	DECQ R15
	JNZ  in4_row

	ADDQ $32, DI
	ADDQ $32, SI
	DECQ AX
	JNZ  in4_loop
	VZEROUPPER
	RET

// AT starts o = Aᵀ x for x0..x5 in Y0-Y5: s12 = x1+x2 in Y6, d12 = x1-x2
// in Y7, s34 = x3+x4 in Y8, d34 = x3-x4 in Y9. AT0-AT3 then make
//   o0 = (x0 + s12) + s34      o2 = s12 + 4 s34
//   o1 = d12 + 2 d34           o3 = (d12 + 8 d34) + x5
// in Y10, one at a time (Y13 scratch, 4 in Y14, 8 in Y15).
#define AT \
	VADDPS Y2, Y1, Y6; \
	VSUBPS Y2, Y1, Y7; \
	VADDPS Y4, Y3, Y8; \
	VSUBPS Y4, Y3, Y9
#define AT0 \
	VADDPS Y6, Y0, Y10; \
	VADDPS Y8, Y10, Y10
#define AT1 \
	VADDPS Y9, Y9, Y13; \
	VADDPS Y13, Y7, Y10
#define AT2 \
	VMULPS Y14, Y8, Y13; \
	VADDPS Y13, Y6, Y10
#define AT3 \
	VMULPS Y15, Y9, Y13; \
	VADDPS Y13, Y7, Y10; \
	VADDPS Y5, Y10, Y10

// AT4 stores o0..o3 of the x in Y0-Y5 at (A), (A)(S*1), (A)(S*2), (B).
#define AT4(A, B, S) \
	AT; \
	AT0; \
	VMOVUPS Y10, (A); \
	AT1; \
	VMOVUPS Y10, (A)(S*1); \
	AT2; \
	VMOVUPS Y10, (A)(S*2); \
	AT3; \
	VMOVUPS Y10, (B)

// func winograd4OutAVX2(dst *float32, row, pix int, src *float32, stride int, bias, res *float32, n int)
//
// n < 0 means -n channels and a ReLU. Pass 1 writes t = Aᵀ m column by
// column over rows 0-3 of src (t[r][c] at position 6r+c); pass 2 reads each
// row of t back and writes that row of Y = t A over its first four
// positions; the epilogue adds the bias and the residual to each output,
// clamps it at zero for a ReLU and stores it at dst + r*row + c*pix.
TEXT ·winograd4OutAVX2(SB), NOSPLIT, $16-64
	MOVQ dst+0(FP), DI
	MOVQ row+8(FP), DX
	MOVQ pix+16(FP), CX
	MOVQ src+24(FP), SI
	MOVQ stride+32(FP), R8
	MOVQ bias+40(FP), BX
	MOVQ res+48(FP), R9
	MOVQ n+56(FP), AX
	MOVQ $0, relu-8(SP)
	TESTQ AX, AX
	JNS  out4_pos
	NEGQ AX
	MOVQ $1, relu-8(SP)

out4_pos:
	SHRQ $3, AX
	VBROADCASTSS wino4const<>+0(SB), Y14
	VBROADCASTSS wino4const<>+8(SB), Y15
	LEAQ (R8)(R8*2), R15   // 3*stride
	LEAQ (R15)(R15*1), R14 // 6*stride

out4_loop:
	// Pass 1: column c of m at SI + c*stride, its rows 6*stride apart.
	LEAQ (R14)(R14*2), R12 // 18*stride
	MOVQ SI, R11
	LEAQ (SI)(R12*1), R13
	MOVQ $6, R10

out4_col:
	LOAD6(R11, R13, R14)
	AT4(R11, R13, R14)
	ADDQ R8, R11
	ADDQ R8, R13
	DECQ R10
	JNZ  out4_col

	// Pass 2: row r of t at SI + 6r*stride, its columns stride apart.
	MOVQ SI, R11
	LEAQ (SI)(R15*1), R13
	MOVQ $4, R10

out4_row:
	LOAD6(R11, R13, R8)
	AT4(R11, R13, R8)
	ADDQ R14, R11
	ADDQ R14, R13
	DECQ R10
	JNZ  out4_row

	// Epilogue: output (r, c) is at SI + (6r+c)*stride; it goes to
	// DI + r*row + c*pix, its residual is at R9 + r*row + c*pix.
	VMOVUPS (BX), Y11
	VPXOR   Y12, Y12, Y12
	MOVQ SI, R11
	MOVQ DI, R13
	MOVQ R9, res-16(SP)
	MOVQ $4, R10

out4_epi:
	VMOVUPS (R11), Y0
	VMOVUPS (R11)(R8*1), Y1
	VMOVUPS (R11)(R8*2), Y2
	VMOVUPS (R11)(R15*1), Y3
	VADDPS  Y11, Y0, Y0
	VADDPS  Y11, Y1, Y1
	VADDPS  Y11, Y2, Y2
	VADDPS  Y11, Y3, Y3
	MOVQ    res-16(SP), R12
	TESTQ   R12, R12
	JZ      out4_nores
	VADDPS  (R12), Y0, Y0
	VADDPS  (R12)(CX*1), Y1, Y1
	VADDPS  (R12)(CX*2), Y2, Y2
	ADDQ    CX, R12
	VADDPS  (R12)(CX*2), Y3, Y3
	SUBQ    CX, R12
	ADDQ    DX, R12
	MOVQ    R12, res-16(SP)

out4_nores:
	CMPQ relu-8(SP), $0
	JE   out4_store
	VMAXPS Y12, Y0, Y0
	VMAXPS Y12, Y1, Y1
	VMAXPS Y12, Y2, Y2
	VMAXPS Y12, Y3, Y3

out4_store:
	VMOVUPS Y0, (R13)
	VMOVUPS Y1, (R13)(CX*1)
	VMOVUPS Y2, (R13)(CX*2)
	LEAQ    (R13)(CX*1), R12
	VMOVUPS Y3, (R12)(CX*2)
	ADDQ    R14, R11
	ADDQ    DX, R13
	DECQ    R10
	JNZ     out4_epi

	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, BX
	TESTQ R9, R9
	JZ   out4_next
	ADDQ $32, R9

out4_next:
	DECQ AX
	JNZ  out4_loop
	VZEROUPPER
	RET

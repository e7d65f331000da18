#include "textflag.h"

// MAX3(P) maximises Y0 with the 8 values at (P), (P)(DX*1) and (P)(DX*2):
// three pixels of one row.
#define MAX3(P) \
	VMAXPS (P), Y0, Y0; \
	VMAXPS (P)(DX*1), Y0, Y0; \
	VMAXPS (P)(DX*2), Y0, Y0

// func max9AVX2(d, src *float32, n, pix, row int)
// d[i] = max over ky, kx in 0..2 of src[ky*row + kx*pix + i] (strides in bytes).
TEXT ·max9AVX2(SB), NOSPLIT, $0-40
	MOVQ d+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ pix+24(FP), DX
	MOVQ row+32(FP), BX
	LEAQ (SI)(BX*1), R8  // row 1
	LEAQ (SI)(BX*2), R9  // row 2
	CMPQ CX, $8
	JLT  tail

loop8:
	VMOVUPS (SI), Y0
	VMAXPS  (SI)(DX*1), Y0, Y0
	VMAXPS  (SI)(DX*2), Y0, Y0
	MAX3(R8)
	MAX3(R9)
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, R8
	ADDQ    $32, R9
	ADDQ    $32, DI
	SUBQ    $8, CX
	CMPQ    CX, $8
	JGE     loop8

tail:
	TESTQ CX, CX
	JZ    done

one:
	VMOVSS (SI), X0
	VMAXSS (SI)(DX*1), X0, X0
	VMAXSS (SI)(DX*2), X0, X0
	VMAXSS (R8), X0, X0
	VMAXSS (R8)(DX*1), X0, X0
	VMAXSS (R8)(DX*2), X0, X0
	VMAXSS (R9), X0, X0
	VMAXSS (R9)(DX*1), X0, X0
	VMAXSS (R9)(DX*2), X0, X0
	VMOVSS X0, (DI)
	ADDQ   $4, SI
	ADDQ   $4, R8
	ADDQ   $4, R9
	ADDQ   $4, DI
	DECQ   CX
	JNZ    one

done:
	VZEROUPPER
	RET

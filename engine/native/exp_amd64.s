// Code written by hand; see exp_amd64.go. AVX2, no FMA: every operation rounds as
// the scalar expf's does, so the results are the same bits.

#include "textflag.h"

DATA expc<>+0(SB)/4, $0x3fb8aa3b // log2e 1.4426950408889634
DATA expc<>+4(SB)/4, $0x3f000000 // half 0.5
DATA expc<>+8(SB)/4, $0x3f318000 // ln2hi 0.693359375
DATA expc<>+12(SB)/4, $0xb95e8083 // ln2lo -0.00021219444
DATA expc<>+16(SB)/4, $0x3f800000 // one 1.0
DATA expc<>+20(SB)/4, $0x42b00000 // hi 88.0
DATA expc<>+24(SB)/4, $0xc2ae999a // lo -87.3
DATA expc<>+28(SB)/4, $0x39506967 // p0 0.000198756915
DATA expc<>+32(SB)/4, $0x3ab743ce // p1 0.0013981999507
DATA expc<>+36(SB)/4, $0x3c088908 // p2 0.0083334519073
DATA expc<>+40(SB)/4, $0x3d2aa9c1 // p3 0.041665795894
DATA expc<>+44(SB)/4, $0x3e2aaaaa // p4 0.16666665459
DATA expc<>+48(SB)/4, $0x3f000000 // p5 0.50000001201
DATA expc<>+52(SB)/4, $127 // exponent bias
GLOBL expc<>(SB), RODATA|NOPTR, $56

// func expSubAVX2(dst, src *float32, n int, m, sign float32) bool
TEXT ·expSubAVX2(SB), NOSPLIT, $0-33
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Y15
	VBROADCASTSS sign+28(FP), Y14
	VBROADCASTSS expc<>+0(SB), Y8
	VBROADCASTSS expc<>+4(SB), Y9
	VBROADCASTSS expc<>+8(SB), Y10
	VBROADCASTSS expc<>+12(SB), Y11
	VBROADCASTSS expc<>+20(SB), Y12
	VBROADCASTSS expc<>+24(SB), Y13

	VPBROADCASTD expc<>+52(SB), Y7
loop:
	CMPQ CX, $8
	JLT done
	VMOVUPS (SI), Y0
	VMULPS Y14, Y0, Y0 // sign: exact
	VSUBPS Y15, Y0, Y0 // x = sign*src - m
	VCMPPS $0x1e, Y12, Y0, Y1 // x > 88: the scalar code's math.Exp path
	VMOVMSKPS Y1, AX
	TESTL AX, AX
	JNZ fail
	VCMPPS $0x11, Y13, Y0, Y2 // x < -87.3: 0
	VMULPS Y8, Y0, Y3
	VADDPS Y9, Y3, Y3
	VROUNDPS $9, Y3, Y3 // n = floor(x*log2e + 0.5)
	VMULPS Y10, Y3, Y4
	VSUBPS Y4, Y0, Y5
	VMULPS Y11, Y3, Y4
	VSUBPS Y4, Y5, Y5 // r = x - n*ln2hi - n*ln2lo
	VBROADCASTSS expc<>+28(SB), Y6
	VMULPS Y5, Y6, Y6
	VBROADCASTSS expc<>+32(SB), Y4
	VADDPS Y4, Y6, Y6
	VMULPS Y5, Y6, Y6
	VBROADCASTSS expc<>+36(SB), Y4
	VADDPS Y4, Y6, Y6
	VMULPS Y5, Y6, Y6
	VBROADCASTSS expc<>+40(SB), Y4
	VADDPS Y4, Y6, Y6
	VMULPS Y5, Y6, Y6
	VBROADCASTSS expc<>+44(SB), Y4
	VADDPS Y4, Y6, Y6
	VMULPS Y5, Y6, Y6
	VBROADCASTSS expc<>+48(SB), Y4
	VADDPS Y4, Y6, Y6
	VMULPS Y5, Y6, Y6
	VMULPS Y5, Y6, Y6
	VADDPS Y5, Y6, Y6
	VBROADCASTSS expc<>+16(SB), Y4
	VADDPS Y4, Y6, Y6 // p = p*r*r + r + 1
	VCVTTPS2DQ Y3, Y4
	VPADDD Y7, Y4, Y4
	VPSLLD $23, Y4, Y4 // 2^n
	VMULPS Y4, Y6, Y6
	VANDNPS Y6, Y2, Y6
	VMOVUPS Y6, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP loop
done:
	VZEROUPPER
	MOVB $1, ret+32(FP)
	RET
fail:
	VZEROUPPER
	MOVB $0, ret+32(FP)
	RET

package main

// hmax8 leaves the largest of the 8 lanes of Y(r) in every lane of X(r), using X(t).
func (g *gen) hmax8(r, t int) {
	g.op("VEXTRACTF128 $1, %s, %s", y(r), x(t))
	g.op("VMAXPS %s, %s, %s", x(t), x(r), x(r))
	g.op("VPERMILPS $0x4e, %s, %s", x(r), x(t))
	g.op("VMAXPS %s, %s, %s", x(t), x(r), x(r))
	g.op("VPERMILPS $0xb1, %s, %s", x(r), x(t))
	g.op("VMAXPS %s, %s, %s", x(t), x(r), x(r))
}

// packCodes turns the int32 codes in Y0..Y3 (values 0..7, 8..15, ...) into 32 int8
// codes in order in Y0. The codes fit in a byte, so the saturating packs are exact.
func (g *gen) packCodes() {
	g.op("VPACKSSDW Y1, Y0, Y0")
	g.op("VPACKSSDW Y3, Y2, Y2")
	g.op("VPACKSSWB Y2, Y0, Y0")
	g.op("VPERMD Y0, Y7, Y0") // Y7: the dword order 0,4,1,5,2,6,3,7
}

// quantRow32 writes the AVX2 activation quantizer for the 32-value formats, the twin
// of quantRow32Go: per block the largest magnitude, d = amax/127, codes RNE(x/d)
// (VCVTPS2DQ), stored plus 128, then the lane sums, as -sum<<shift or as float32. It
// returns false if the row holds a NaN or an infinity (x*0 is NaN only for those).
func (g *gen) quantRow32() string {
	name := "quantRow32"
	g.textRet(name, "x *float32, nb int, dst *byte, d *float32, shift int, lanes int", "ok bool", 0)
	g.op("MOVQ x+0(FP), SI")
	g.op("MOVQ nb+8(FP), CX")
	g.op("MOVQ dst+16(FP), DI")
	g.op("MOVQ d+24(FP), R8")
	g.op("VMOVQ shift+32(FP), X14")
	g.op("MOVQ lanes+40(FP), R9")
	g.op("VBROADCASTSS absmask<>(SB), Y8")
	g.op("VXORPS Y10, Y10, Y10")
	g.op("VXORPS Y11, Y11, Y11")
	g.op("VMOVDQU c01<>(SB), Y12")
	g.op("VMOVDQU ones16<>(SB), Y13")
	g.op("VMOVDQU c80<>(SB), Y15")
	g.op("VMOVDQU packperm<>(SB), Y7")
	g.label(name + "_loop")
	for i := range 4 {
		g.op("VMOVUPS %d(SI), %s", 32*i, y(i))
		g.op("VFMADD231PS Y10, %s, Y11", y(i))
	}
	g.op("VANDPS Y8, Y0, Y4")
	g.op("VANDPS Y8, Y1, Y5")
	g.op("VMAXPS Y5, Y4, Y4")
	g.op("VANDPS Y8, Y2, Y5")
	g.op("VANDPS Y8, Y3, Y6")
	g.op("VMAXPS Y6, Y5, Y5")
	g.op("VMAXPS Y5, Y4, Y4")
	g.hmax8(4, 5)
	g.op("VCMPSS $5, tiny<>(SB), X4, X6") // amax >= tinyBlock, else the block is zeros
	g.op("VANDPS X6, X4, X4")
	g.op("VDIVSS f127<>(SB), X4, X4") // d
	g.op("VMOVSS X4, (R8)")
	g.op("VMOVSS f1<>(SB), X5")
	g.op("VDIVSS X4, X5, X5")      // 1/d
	g.op("VCMPSS $4, X10, X4, X6") // d != 0
	g.op("VANDPS X6, X5, X5")      // id = 0 when d = 0
	g.op("VBROADCASTSS X5, Y9")
	for i := range 4 {
		g.op("VMULPS Y9, %s, %s", y(i), y(i))
		g.op("VCVTPS2DQ %s, %s", y(i), y(i))
	}
	g.packCodes()
	g.op("VPMADDUBSW Y0, Y12, Y1") // pair sums of the codes
	g.op("VPMADDWD Y13, Y1, Y1")   // lane sums
	g.op("VPXOR Y15, Y0, Y0")
	g.op("VMOVDQU Y0, (DI)")
	g.op("TESTQ R9, R9")
	g.op("JNZ %s_float", name)
	g.op("VPSLLD X14, Y1, Y1")
	g.op("VPSUBD Y1, Y10, Y1")
	g.op("VMOVDQU Y1, 32(DI)")
	g.op("JMP %s_next", name)
	g.label(name + "_float")
	g.op("VCVTDQ2PS Y1, Y1")
	g.op("VMOVUPS Y1, 32(DI)")
	g.label(name + "_next")
	g.op("ADDQ $128, SI")
	g.op("ADDQ $%d, DI", 64)
	g.op("ADDQ $4, R8")
	g.op("DECQ CX")
	g.op("JNZ %s_loop", name)
	g.finite("Y11", "ok+48(FP)")
	return name
}

// finite stores whether the NaN detector acc stayed free of NaNs, and returns.
func (g *gen) finite(acc, ret string) {
	g.op("VCMPPS $3, %s, %s, %s", acc, acc, acc) // unordered: NaN
	g.op("VMOVMSKPS %s, AX", acc)
	g.op("TESTL AX, AX")
	g.op("SETEQ %s", ret)
	g.op("VZEROUPPER")
	g.op("RET")
}

// quantRowK writes the AVX2 activation quantizer for the K-quants, the twin of
// quantQ8K: per 256 values the first value of largest magnitude, iscale = -127/it,
// codes min(127, RNE(iscale*x)), sums of each 16 codes, d = 1/iscale; all-zero blocks
// are all zeros. It returns false if the row holds a NaN or an infinity.
func (g *gen) quantRowK() string {
	name := "quantRowK"
	g.textRet(name, "x *float32, nb int, dst *byte", "ok bool", 0)
	g.op("MOVQ x+0(FP), SI")
	g.op("MOVQ nb+8(FP), CX")
	g.op("MOVQ dst+16(FP), DI")
	g.op("VBROADCASTSS absmask<>(SB), Y8")
	g.op("VXORPS Y10, Y10, Y10")
	g.op("VXORPS Y11, Y11, Y11")
	g.op("VMOVDQU c01<>(SB), Y12")
	g.op("VMOVDQU ones16<>(SB), Y13")
	g.op("VPBROADCASTD i127<>(SB), Y14")
	g.op("VMOVDQU packperm<>(SB), Y7")
	g.label(name + "_loop")
	g.op("VXORPS Y4, Y4, Y4")
	g.op("XORQ R10, R10")
	g.label(name + "_max")
	g.op("VANDPS (SI)(R10*1), Y8, Y5")
	g.op("VMAXPS Y5, Y4, Y4")
	g.op("VFMADD231PS (SI)(R10*1), Y10, Y11")
	g.op("ADDQ $32, R10")
	g.op("CMPQ R10, $1024")
	g.op("JLT %s_max", name)
	g.hmax8(4, 5)
	g.op("VUCOMISS tiny<>(SB), X4")
	g.op("JCC %s_nonzero", name) // amax >= tinyBlock
	g.comment("below tinyBlock (or NaN, which the caller redoes): a zero block")
	for off := 0; off < 288; off += 32 {
		g.op("VMOVDQU Y10, %d(DI)", off)
	}
	g.op("MOVL $0, 288(DI)")
	g.op("JMP %s_next", name)
	g.label(name + "_nonzero")
	g.op("VBROADCASTSS X4, Y4")
	g.op("XORQ R10, R10")
	g.label(name + "_find")
	g.op("VANDPS (SI)(R10*1), Y8, Y5")
	g.op("VCMPPS $0, Y4, Y5, Y5")
	g.op("VMOVMSKPS Y5, AX")
	g.op("TESTL AX, AX")
	g.op("JNZ %s_found", name)
	g.op("ADDQ $32, R10")
	g.op("CMPQ R10, $1024")
	g.op("JLT %s_find", name)
	g.op("MOVB $0, ok+24(FP)") // unreachable unless amax is NaN
	g.op("VZEROUPPER")
	g.op("RET")
	g.label(name + "_found")
	g.op("BSFL AX, AX")
	g.op("LEAQ (R10)(AX*4), R10")
	g.op("VMOVSS fm127<>(SB), X6")
	g.op("VDIVSS (SI)(R10*1), X6, X6") // iscale = -127/max
	g.op("VMOVSS f1<>(SB), X5")
	g.op("VDIVSS X6, X5, X5") // d = 1/iscale
	g.op("VMOVSS X5, (DI)")
	g.op("VBROADCASTSS X6, Y9")
	for c := range 8 {
		for i := range 4 {
			g.op("VMULPS %d(SI), Y9, %s", 128*c+32*i, y(i))
			g.op("VCVTPS2DQ %s, %s", y(i), y(i))
			g.op("VPMINSD Y14, %s, %s", y(i), y(i))
		}
		g.packCodes()
		g.op("VMOVDQU Y0, %d(DI)", 4+32*c)
		g.op("VPMADDUBSW Y0, Y12, Y1")
		g.op("VPMADDWD Y13, Y1, Y1") // sums of 4
		g.op("VPHADDD Y1, Y1, Y1")
		g.op("VPHADDD Y1, Y1, Y1") // sums of 16: dword 0 of each half
		g.op("VMOVD X1, AX")
		g.op("MOVW AX, %d(DI)", 260+4*c)
		g.op("VEXTRACTI128 $1, Y1, X1")
		g.op("VMOVD X1, AX")
		g.op("MOVW AX, %d(DI)", 262+4*c)
	}
	g.label(name + "_next")
	g.op("ADDQ $1024, SI")
	g.op("ADDQ $%d, DI", q8kBytes)
	g.op("DECQ CX")
	g.op("JNZ %s_loop", name)
	g.finite("Y11", "ok+24(FP)")
	return name
}

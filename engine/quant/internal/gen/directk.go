package main

import "fmt"

// directK writes the AVX-512 direct kernel for one activation row (decode) of Q4_K,
// Q5_K or Q6_K: each super-block of the tile's 4 columns is unpacked in registers,
// as prepK unpacks it into memory, and multiplied at once, so decode neither writes
// nor reads a prepared copy. The integer lanes are dotK's (the same sums of products,
// in another order, which integers do not see: each chunk of 32 values goes to one of
// two accumulators, added before the fold), and the fold is dotK's, so the bits are
// the same.
//
// Registers: BX args; SI the Q8_K activation row's current super-block; R10..R13 the
// tile's 4 weight columns, R14 the super-block's offset in them; CX super-blocks
// left; AX, DX, DI, R8, R9 scratch. Vectors: Y16+j column j's float accumulator;
// Y15 the activation's d; Y29..Y31 the byte masks 0x30, 0x10, 0x0f; Y0..Y14 the
// column being done. The frame holds the tile state: tiles left at 0, column 0 of the
// tile at 8, its outputs at 16.
func (g *gen) directK(typ string) string {
	name := fmt.Sprintf("direct%s_avx512_1", typ)
	fmt.Fprintf(&g.b, "\n// func %s(p *directArgs)\nTEXT ·%s(SB), $24-8\n", name, name)
	bytes := map[string]int{"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}[typ]
	g.op("MOVQ p+0(FP), BX")
	g.op("MOVQ directArgs_ntiles(BX), AX")
	g.op("MOVQ AX, 0(SP)")
	g.op("MOVQ directArgs_w(BX), AX")
	g.op("MOVQ AX, 8(SP)")
	g.op("MOVQ directArgs_out(BX), AX")
	g.op("MOVQ AX, 16(SP)")
	g.op("VMOVDQU32 c0f<>(SB), Y31")
	g.op("VMOVDQU32 c10<>(SB), Y30")
	g.op("VMOVDQU32 c30<>(SB), Y29")
	g.label(name + "_tile")
	g.op("MOVQ directArgs_x(BX), SI")
	g.op("MOVQ directArgs_nb(BX), CX")
	g.op("MOVQ 8(SP), AX")
	for c := range 4 {
		g.op("MOVQ directArgs_coff+%d(BX), %s", 8*c, wcol[c])
		g.op("ADDQ AX, %s", wcol[c])
		g.op("VPXORD Y%d, Y%d, Y%d", 16+c, 16+c, 16+c)
	}
	g.op("XORQ R14, R14")
	g.label(name + "_sb")
	// As in directz: prefetch every line of the super-block at the same place of a
	// tile a few KB ahead.
	g.op("MOVQ directArgs_pf(BX), AX")
	g.op("ADDQ R14, AX")
	for c := range 4 {
		for off := 0; off < bytes; off += 64 {
			g.op("PREFETCHT0 %d(%s)(AX*1)", off, wcol[c])
		}
	}
	g.op("VBROADCASTSS (SI), X15")
	for c := range 4 {
		if typ == "Q6_K" {
			g.directQ6K(c)
		} else {
			g.directQ45K(c, typ == "Q5_K")
		}
	}
	g.op("ADDQ $%d, SI", q8kBytes)
	g.op("ADDQ $%d, R14", bytes)
	g.op("DECQ CX")
	g.op("JNZ %s_sb", name)
	g.comment("out[0:4] += the reduced accumulators, under the column mask")
	for c := range 4 {
		g.op("VMOVAPS Y%d, Y%d", 16+c, c)
	}
	g.op("MOVQ directArgs_mask(BX), R13")
	g.op("MOVQ 16(SP), DX")
	g.op("MOVQ directArgs_ldo(BX), R14")
	g.storeRow(0)
	g.op("ADDQ $16, 16(SP)")
	g.op("MOVQ directArgs_tstride(BX), AX")
	g.op("ADDQ AX, 8(SP)")
	g.op("DECQ 0(SP)")
	g.op("JNZ %s_tile", name)
	g.op("VZEROUPPER")
	g.op("RET")
	return name
}

// directQ45K folds column c's Q4_K or Q5_K super-block into Y(16+c): prepQ45K's
// unpacking (the 6-bit scales and mins with ggml's masks, in five scratch registers),
// then dotK's products and fold.
func (g *gen) directQ45K(c int, q5 bool) {
	w := wcol[c] + ")(R14*1"
	g.op("MOVL 4(%s), AX", w)  // scale bytes 0..3
	g.op("MOVL 8(%s), DX", w)  // 4..7
	g.op("MOVL 12(%s), DI", w) // 8..11
	g.op("MOVL AX, R8")
	g.op("ANDL $0x3f3f3f3f, R8") // scales 0..3
	g.op("SHRL $6, AX")
	g.op("ANDL $0x03030303, AX")
	g.op("SHLL $4, AX")
	g.op("MOVL DI, R9")
	g.op("ANDL $0x0f0f0f0f, R9")
	g.op("ORL R9, AX") // scales 4..7
	g.op("SHLQ $32, AX")
	g.op("ORQ R8, AX")
	g.op("MOVL DX, R8")
	g.op("ANDL $0x3f3f3f3f, R8") // mins 0..3
	g.op("SHRL $6, DX")
	g.op("ANDL $0x03030303, DX")
	g.op("SHLL $4, DX")
	g.op("SHRL $4, DI")
	g.op("ANDL $0x0f0f0f0f, DI")
	g.op("ORL DI, DX") // mins 4..7
	g.op("SHLQ $32, DX")
	g.op("ORQ R8, DX")
	g.op("VMOVQ AX, X0")
	g.op("VPMOVZXBW X0, X0") // the 8 scales as words, in both halves
	g.op("VINSERTI128 $1, X0, Y0, Y0")
	g.op("VMOVQ DX, X1")
	g.op("VPMOVZXBW X1, X1") // the 8 mins, each once per 16 values
	g.op("VPUNPCKLWD X1, X1, X2")
	g.op("VPUNPCKHWD X1, X1, X3")
	g.op("VINSERTI128 $1, X3, Y2, Y2")
	g.op("VPMADDWD 260(SI), Y2, Y14") // the min lanes
	qs := 16
	if q5 {
		qs = 48
		g.op("VMOVDQU 16(%s), Y12", w) // qh: value l of sub-block s has bit s of byte l
	}
	g.op("VPXORD Y4, Y4, Y4")
	g.op("VPXORD Y5, Y5, Y5")
	for k := range 4 {
		g.op("VMOVDQU %d(%s), Y13", qs+32*k, w)
		g.op("VPANDD Y31, Y13, Y6")
		g.op("VPSRLW $4, Y13, Y7")
		g.op("VPANDD Y31, Y7, Y7")
		if q5 {
			g.bitTo4(2*k, "Y12", "Y8")
			g.op("VPTERNLOGD $0xf8, Y30, Y8, Y6") // Y6 |= Y8 & 0x10
			g.bitTo4(2*k+1, "Y12", "Y9")
			g.op("VPTERNLOGD $0xf8, Y30, Y9, Y7")
		}
		for h := range 2 {
			cc := 2*k + h
			g.op("VPSHUFB bcw%d<>(SB), Y0, Y%d", cc, 10+h)
			g.op("VPMADDUBSW %d(SI), Y%d, Y%d", 4+32*cc, 6+h, 8+h)
			g.op("VPDPWSSD Y%d, Y%d, Y%d", 10+h, 8+h, 4+h)
		}
	}
	g.op("VPADDD Y5, Y4, Y4")
	g.op("VCVTDQ2PS Y4, Y4")
	g.op("VCVTDQ2PS Y14, Y14")
	g.op("VPBROADCASTD (%s), X3", w) // d and dmin
	g.op("VCVTPH2PS X3, X3")
	g.op("VMULPS X15, X3, X3") // times the activation's d
	g.op("VBROADCASTSS X3, Y10")
	g.op("VMOVSHDUP X3, X11")
	g.op("VBROADCASTSS X11, Y11")
	g.op("VFMADD231PS Y10, Y4, Y%d", 16+c)
	g.op("VFNMADD231PS Y11, Y14, Y%d", 16+c)
}

// directQ6K folds column c's Q6_K super-block into Y(16+c): prepQ6K's unpacking, then
// dotK's products and fold.
func (g *gen) directQ6K(c int) {
	w := wcol[c] + ")(R14*1"
	g.op("VPMOVSXBW 192(%s), Y1", w) // the 16 scales
	g.op("VPMADDWD 260(SI), Y1, Y14")
	g.op("VPSLLD $5, Y14, Y14")  // the offset lanes, 32 times
	g.op("VPERMQ $0x44, Y1, Y2") // scales 0..7 in both halves
	g.op("VPERMQ $0xee, Y1, Y3") // 8..15
	g.op("VPXORD Y4, Y4, Y4")
	g.op("VPXORD Y5, Y5, Y5")
	for h := range 2 {
		g.op("VMOVDQU %d(%s), Y6", 64*h, w)
		g.op("VMOVDQU %d(%s), Y7", 64*h+32, w)
		g.op("VMOVDQU %d(%s), Y8", 128+32*h, w)
		for t := range 4 {
			cc := 4*h + t
			q := "Y6"
			if t&1 == 1 {
				q = "Y7"
			}
			if t >= 2 {
				g.op("VPSRLW $4, %s, Y9", q)
				g.op("VPANDD Y31, Y9, Y9")
			} else {
				g.op("VPANDD Y31, %s, Y9", q)
			}
			// Bits 2t, 2t+1 of qh to bits 4, 5.
			hb := "Y10"
			switch sh := 4 - 2*t; {
			case sh > 0:
				g.op("VPSLLW $%d, Y8, Y10", sh)
			case sh < 0:
				g.op("VPSRLW $%d, Y8, Y10", -sh)
			default:
				hb = "Y8"
			}
			g.op("VPTERNLOGD $0xf8, Y29, %s, Y9", hb) // Y9 |= hb & 0x30
			src := "Y2"
			if cc >= 4 {
				src = "Y3"
			}
			g.op("VPSHUFB q6pat%d<>(SB), %s, Y11", cc%4, src) // scale 2cc, then 2cc+1
			g.op("VPMADDUBSW %d(SI), Y9, Y12", 4+32*cc)
			g.op("VPDPWSSD Y11, Y12, Y%d", 4+cc%2)
		}
	}
	g.op("VPADDD Y5, Y4, Y4")
	g.op("VPSUBD Y14, Y4, Y4")
	g.op("VCVTDQ2PS Y4, Y4")
	g.op("VPBROADCASTW 208(%s), X3", w)
	g.op("VCVTPH2PS X3, X3")
	g.op("VMULPS X15, X3, X3")
	g.op("VBROADCASTSS X3, Y10")
	g.op("VFMADD231PS Y10, Y4, Y%d", 16+c)
}

package main

import (
	"fmt"
)

// Direct kernels: for a few activation rows (decode), read the weights' GGUF blocks in
// place, with no prepared copy, and walk every 4-column tile of the call in one go.
//
// Registers: BX args; SI, DI, R8, R9 activation rows; R10..R13 the tile's 4 weight
// columns, R14 the block's offset in them; CX blocks done; AX, DX scratch. The stack
// frame holds the scale products of the current group of blocks (s at 0, the min
// products at 1024) and the tile state (below).
var wcol = []string{"R10", "R11", "R12", "R13"}

const (
	frameTile = 2048 // tiles left
	frameW    = 2056 // column 0 of the current tile
	frameOut  = 2064 // outputs of the current tile
	frameSize = 2072
)

// unpackDirect leaves column c's block (at wcol[c]) as unsigned codes in dst: the
// 32-value formats' codes, Q8_0's plus 128 (the activation lane values correct the
// offsets). tmp is a scratch vector register.
func (g *gen) unpackDirect(is isa, u unpack32, c int, dst, tmp string) {
	w := wcol[c] + ")(R14*1"
	if u.q8 {
		g.op("%s %d(%s), %s", is.movdqu(), u.qs, w, dst)
		g.op("%s c80<>(SB), %s, %s", is.xor(), dst, dst)
		return
	}
	if is.evex {
		g.op("VBROADCASTI32X4 %d(%s), %s", u.qs, w, dst)
		g.op("VPSRLVD srl4<>(SB), %s, %s", dst, dst)
		g.op("VPANDD c0f<>(SB), %s, %s", dst, dst)
		if u.qh >= 0 {
			g.op("KMOVD %d(%s), K2", u.qh, w)
			g.op("VPADDB c10<>(SB), %s, K2, %s", dst, dst) // +16 where the fifth bit is set
		}
		return
	}
	g.op("VBROADCASTI128 %d(%s), %s", u.qs, w, dst)
	g.op("VPSRLVD srl4<>(SB), %s, %s", dst, dst)
	g.op("VPAND c0f<>(SB), %s, %s", dst, dst)
	if u.qh >= 0 {
		g.op("VPBROADCASTD %d(%s), %s", u.qh, w, tmp)
		g.op("VPSHUFB qhshuf<>(SB), %s, %s", tmp, tmp)
		g.op("VPAND qhbits<>(SB), %s, %s", tmp, tmp)
		g.op("VPCMPEQB qhbits<>(SB), %s, %s", tmp, tmp)
		g.op("VPAND c10<>(SB), %s, %s", tmp, tmp)
		g.op("VPOR %s, %s, %s", tmp, dst, dst)
	}
}

// xor is the bitwise xor that reaches every register of the set.
func (is isa) xor() string {
	if is.evex {
		return "VPXORD"
	}
	return "VPXOR"
}

// directScales computes the group's scale products at the top of the block loop
// (CX a multiple of the group): the f16 scales of the next G blocks of each column are
// gathered (their dwords: d, and m above it for the min formats), converted, and
// multiplied by each row's activation scales.
func (g *gen) directScales(is isa, u unpack32, rm int) {
	G := group
	g.op("MOVQ directArgs_nb(BX), DX")
	g.op("SUBQ CX, DX") // blocks left
	g.op("CMPQ DX, $%d", G)
	g.op("JLE 2(PC)")
	g.op("MOVQ $%d, DX", G)
	for c := range 4 {
		if is.evex {
			g.op("LEAQ gmaskb<>(SB), AX")
			g.op("KMOVB (AX)(DX*1), K1")
			g.op("VPXORD Y16, Y16, Y16")
			g.op("LEAQ (%s)(R14*1), AX", wcol[c])
			g.op("VPGATHERDD (AX)(Y31*1), K1, Y16")
			g.op("VPMOVDW Y16, X17")
			g.op("VCVTPH2PS X17, %s", y(20+c))
			if u.min {
				g.op("VPSRLD $16, Y16, Y16")
				g.op("VPMOVDW Y16, X17")
				g.op("VCVTPH2PS X17, %s", y(24+c))
			}
			continue
		}
		// AVX2: gather 8 dwords, keep their low (or high) halves, convert. Each
		// column's products are stored before the next column is gathered.
		g.op("SHLQ $5, DX")
		g.op("LEAQ gmask8<>(SB), AX")
		g.op("VMOVDQU (AX)(DX*1), Y9")
		g.op("SHRQ $5, DX")
		g.op("VPXOR Y10, Y10, Y10")
		g.op("LEAQ (%s)(R14*1), AX", wcol[c])
		g.op("VPGATHERDD Y9, (AX)(Y8*1), Y10")
		halves := func(pick, dst string) {
			g.op("VPSHUFB %s<>(SB), Y10, Y11", pick)
			g.op("VPERMQ $0x08, Y11, Y11")
			g.op("VCVTPH2PS X11, %s", dst)
		}
		halves("pickd", "Y12")
		if u.min {
			halves("pickm", "Y13")
		}
		g.op("MOVQ directArgs_dx(BX), AX")
		g.op("LEAQ (AX)(CX*4), AX")
		for i := range rm {
			g.op("VMULPS (AX), Y12, Y14")
			g.op("VMOVUPS Y14, %d(SP)", (4*i+c)*G*4)
			if u.min {
				g.op("VMULPS (AX), Y13, Y14")
				g.op("VMOVUPS Y14, %d(SP)", 1024+(4*i+c)*G*4)
			}
			if i < rm-1 {
				g.op("ADDQ directArgs_ldd(BX), AX")
			}
		}
	}
	if !is.evex {
		return
	}
	g.op("MOVQ directArgs_dx(BX), AX")
	g.op("LEAQ (AX)(CX*4), AX")
	for i := range rm {
		g.op("VMOVUPS (AX), Y18")
		for c := range 4 {
			g.op("VMULPS Y18, %s, Y19", y(20+c))
			g.op("VMOVUPS Y19, %d(SP)", (4*i+c)*G*4)
			if u.min {
				g.op("VMULPS Y18, %s, Y19", y(24+c))
				g.op("VMOVUPS Y19, %d(SP)", 1024+(4*i+c)*G*4)
			}
		}
		if i < rm-1 {
			g.op("ADDQ directArgs_ldd(BX), AX")
		}
	}
}

// direct writes the direct kernel for format u and rm rows. Per block and output:
// the lane integers (activation lane values + unsigned weight codes . signed
// activation codes), converted, folded in with the block's scale product; the min
// formats then fold the float lane sums times min*dx.
func (g *gen) direct(is isa, u unpack32, rm int) string {
	name := fmt.Sprintf("direct%s_%s_%d", u.name, is.name, rm)
	G := group
	fmt.Fprintf(&g.b, "\n// func %s(p *directArgs)\nTEXT ·%s(SB), $%d-8\n", name, name, frameSize)
	g.op("MOVQ p+0(FP), BX")
	g.op("MOVQ directArgs_ntiles(BX), AX")
	g.op("MOVQ AX, %d(SP)", frameTile)
	g.op("MOVQ directArgs_w(BX), AX")
	g.op("MOVQ AX, %d(SP)", frameW)
	g.op("MOVQ directArgs_out(BX), AX")
	g.op("MOVQ AX, %d(SP)", frameOut)
	if is.evex {
		g.op("VMOVDQU32 gidx%s<>(SB), Y31", u.name)
	}
	g.label(name + "_tile")
	g.loadRows(rm, "directArgs_x(BX)", "directArgs_ldx(BX)")
	g.op("MOVQ %d(SP), AX", frameW)
	for c := range 4 {
		g.op("MOVQ directArgs_coff+%d(BX), %s", 8*c, wcol[c])
		g.op("ADDQ AX, %s", wcol[c])
	}
	for i := 0; i < 4*rm; i++ {
		g.op("VXORPS %s, %s, %s", y(i), y(i), y(i))
	}
	g.op("XORQ CX, CX")
	g.op("XORQ R14, R14")
	g.label(name + "_block")
	g.op("TESTQ $%d, CX", G-1)
	g.op("JNZ %s_noscales", name)
	if !is.evex {
		g.op("VMOVDQU gidx%s<>(SB), Y8", u.name)
	}
	g.directScales(is, u, rm)
	g.label(name + "_noscales")
	// Decode streams every weight from memory once: prefetch the same place of a tile
	// a few KB on (directArgs.pf, whole tiles), so that the loads of one tile overlap
	// the misses of later ones. Without it, m=1 over weights larger than the caches
	// ran at a quarter of its in-cache speed.
	g.op("MOVQ directArgs_pf(BX), AX")
	g.op("ADDQ R14, AX")
	for c := range 4 {
		g.op("PREFETCHT0 (%s)(AX*1)", wcol[c])
	}
	g.op("MOVQ CX, DX")
	g.op("ANDQ $%d, DX", G-1) // the block's place in its group: s at (SP)(DX*4)
	if is.evex {
		g.directBlockEVEX(u, rm, G)
	} else {
		g.directBlockAVX2(u, rm, G)
	}
	for i := range rm {
		g.op("ADDQ $64, %s", xrow[i])
	}
	g.op("ADDQ $%d, R14", u.bytes)
	g.op("INCQ CX")
	g.op("CMPQ CX, directArgs_nb(BX)")
	g.op("JLT %s_block", name)
	g.comment("out[i][0:4] += the rows' reduced accumulators, under the column mask")
	g.op("MOVQ directArgs_mask(BX), R13")
	g.op("MOVQ %d(SP), DX", frameOut)
	g.op("MOVQ directArgs_ldo(BX), R14")
	for i := range rm {
		g.storeRow(4 * i)
	}
	g.op("ADDQ $16, %d(SP)", frameOut)
	g.op("MOVQ directArgs_tstride(BX), AX")
	g.op("ADDQ AX, %d(SP)", frameW)
	g.op("DECQ %d(SP)", frameTile)
	g.op("JNZ %s_tile", name)
	g.op("VZEROUPPER")
	g.op("RET")
	return name
}

func (g *gen) directBlockEVEX(u unpack32, rm, G int) {
	for i := range rm {
		g.op("VMOVDQU32 (%s), %s", xrow[i], y(16+i))
		g.op("VPXORD c80<>(SB), %s, %s", y(16+i), y(16+i)) // signed codes
	}
	for c := range 4 {
		g.unpackDirect(avx512, u, c, y(20+c), "")
	}
	for c := range 4 {
		for i := range rm {
			t := y(24 + (4*i+c)%4)
			acc := y(4*i + c)
			if u.min {
				g.op("VPXORD %s, %s, %s", t, t, t)
			} else {
				g.op("VMOVDQU32 32(%s), %s", xrow[i], t) // -offset x lane sums
			}
			g.op("VPDPBUSD %s, %s, %s", y(16+i), y(20+c), t)
			g.op("VCVTDQ2PS %s, %s", t, t)
			g.op("VFMADD231PS.BCST %d(SP)(DX*4), %s, %s", (4*i+c)*G*4, t, acc)
			if u.min {
				t2 := y(28 + (4*i+c)%3) // Y31 holds the gather indices
				g.op("VBROADCASTSS %d(SP)(DX*4), %s", 1024+(4*i+c)*G*4, t2)
				g.op("VFMADD231PS 32(%s), %s, %s", xrow[i], t2, acc)
			}
		}
	}
}

// directBlockAVX2: VPMADDUBSW of the unsigned weight codes and the signed activation
// codes, VPMADDWD by ones, plus the activation lane values; Q8_0 instead moves the
// weight's sign onto the activation (VPSIGNB) and multiplies by |w|, with no offset.
// Registers: rows Y8, Y9; codes Y10; products Y11, Y12; broadcasts Y13, Y14; Y15
// scratch.
func (g *gen) directBlockAVX2(u unpack32, rm, G int) {
	for i := range rm {
		g.op("VMOVDQU (%s), %s", xrow[i], y(8+i))
		g.op("VPXOR c80<>(SB), %s, %s", y(8+i), y(8+i))
	}
	for c := range 4 {
		if u.q8 {
			g.op("VPABSB %d(%s)(R14*1), Y10", u.qs, wcol[c])
		} else {
			g.unpackDirect(avx2, u, c, "Y10", "Y15")
		}
		for i := range rm {
			t, bc := y(11+i%2), y(13+i%2)
			acc := y(4*i + c)
			if u.q8 {
				g.op("VPSIGNB %d(%s)(R14*1), %s, %s", u.qs, wcol[c], y(8+i), t)
				g.op("VPMADDUBSW %s, Y10, %s", t, t)
				g.op("VPMADDWD ones16<>(SB), %s, %s", t, t)
			} else {
				g.op("VPMADDUBSW %s, Y10, %s", y(8+i), t)
				g.op("VPMADDWD ones16<>(SB), %s, %s", t, t)
				if !u.min {
					g.op("VPADDD 32(%s), %s, %s", xrow[i], t, t)
				}
			}
			g.op("VCVTDQ2PS %s, %s", t, t)
			g.op("VBROADCASTSS %d(SP)(DX*4), %s", (4*i+c)*G*4, bc)
			g.op("VFMADD231PS %s, %s, %s", bc, t, acc)
			if u.min {
				g.op("VBROADCASTSS %d(SP)(DX*4), %s", 1024+(4*i+c)*G*4, bc)
				g.op("VFMADD231PS 32(%s), %s, %s", xrow[i], bc, acc)
			}
		}
	}
}

package main

import "fmt"

// directz writes the AVX-512 direct kernel for one activation row (decode) of Q8_0,
// Q4_0 or Q5_0 at 512-bit width: each zmm register holds two columns' 8 lanes side by side,
// so one VPDPBUSD, conversion and fma serve two outputs, and each block's scale
// products are made in place (the f16 scales broadcast and converted, times the
// row's scale) instead of gathered eight blocks at a time. The arithmetic per lane is
// direct's, so the bits are the same.
//
// Registers: BX args; SI the activation row; R8 its scales; R10..R13 the tile's 4
// weight columns, R14 the block's offset in them; CX blocks done; AX scratch.
// Accumulators: Z0 columns 0 and 1, Z2 columns 2 and 3. The frame holds the tile
// state: tiles left at 0, column 0 of the tile at 8, its outputs at 16.
func (g *gen) directz(u unpack32) string {
	name := fmt.Sprintf("direct%sz_avx512_1", u.name)
	fmt.Fprintf(&g.b, "\n// func %s(p *directArgs)\nTEXT ·%s(SB), $24-8\n", name, name)
	g.op("MOVQ p+0(FP), BX")
	g.op("MOVQ directArgs_ntiles(BX), AX")
	g.op("MOVQ AX, 0(SP)")
	g.op("MOVQ directArgs_w(BX), AX")
	g.op("MOVQ AX, 8(SP)")
	g.op("MOVQ directArgs_out(BX), AX")
	g.op("MOVQ AX, 16(SP)")
	g.label(name + "_tile")
	g.op("MOVQ directArgs_x(BX), SI")
	g.op("MOVQ directArgs_dx(BX), R8")
	g.op("MOVQ 8(SP), AX")
	for c := range 4 {
		g.op("MOVQ directArgs_coff+%d(BX), %s", 8*c, wcol[c])
		g.op("ADDQ AX, %s", wcol[c])
	}
	g.op("VXORPS Y0, Y0, Y0")
	g.op("VXORPS Y2, Y2, Y2")
	g.op("XORQ CX, CX")
	g.op("XORQ R14, R14")
	g.label(name + "_block")
	// Prefetch the same place of a tile a few KB ahead (directArgs.pf): one tile
	// ahead, as direct does, left the memory idle.
	g.op("MOVQ directArgs_pf(BX), AX")
	g.op("ADDQ R14, AX")
	for c := range 4 {
		g.op("PREFETCHT0 (%s)(AX*1)", wcol[c])
	}
	g.op("VBROADCASTI64X4 (SI), Z16")
	g.op("VPXORD z80<>(SB), Z16, Z16")  // signed codes
	g.op("VBROADCASTI64X4 32(SI), Z17") // -offset x lane sums
	for p := range 2 {
		c0, c1 := wcol[2*p]+")(R14*1", wcol[2*p+1]+")(R14*1"
		w, s, t := fmt.Sprintf("Z%d", 20+p), fmt.Sprintf("Z%d", 22+p), fmt.Sprintf("Z%d", 24+p)
		if u.q8 {
			g.op("VMOVDQU32 %d(%s), Y%d", u.qs, c0, 20+p)
			g.op("VINSERTI64X4 $1, %d(%s), %s, %s", u.qs, c1, w, w)
			g.op("VPXORD z80<>(SB), %s, %s", w, w)
		} else {
			g.op("VBROADCASTI32X4 %d(%s), Y%d", u.qs, c0, 20+p)
			g.op("VBROADCASTI32X4 %d(%s), Y%d", u.qs, c1, 26+p)
			g.op("VINSERTI64X4 $1, Y%d, %s, %s", 26+p, w, w)
			g.op("VPSRLVD zsrl4<>(SB), %s, %s", w, w)
			g.op("VPANDD z0f<>(SB), %s, %s", w, w)
			if u.qh >= 0 { // +16 where the fifth bit is set: bit l of K4 is byte l's
				g.op("KMOVD %d(%s), K2", u.qh, c0)
				g.op("KMOVD %d(%s), K3", u.qh, c1)
				g.op("KUNPCKDQ K2, K3, K4")
				g.op("VPADDB z10<>(SB), %s, K4, %s", w, w)
			}
		}
		g.op("VPBROADCASTW (%s), X%d", c0, 22+p)
		g.op("VPBROADCASTW (%s), X%d", c1, 28+p)
		g.op("VINSERTI32X4 $1, X%d, Y%d, Y%d", 28+p, 22+p, 22+p)
		g.op("VCVTPH2PS Y%d, %s", 22+p, s)
		g.op("VMULPS.BCST (R8), %s, %s", s, s)
		g.op("VMOVDQA64 Z17, %s", t)
		g.op("VPDPBUSD Z16, %s, %s", w, t)
		g.op("VCVTDQ2PS %s, %s", t, t)
		g.op("VFMADD231PS %s, %s, Z%d", s, t, 2*p)
	}
	g.op("ADDQ $64, SI")
	g.op("ADDQ $4, R8")
	g.op("ADDQ $%d, R14", u.bytes)
	g.op("INCQ CX")
	g.op("CMPQ CX, directArgs_nb(BX)")
	g.op("JLT %s_block", name)
	g.comment("out[0:4] += the reduced accumulators, under the column mask")
	g.op("VEXTRACTF64X4 $1, Z0, Y1")
	g.op("VEXTRACTF64X4 $1, Z2, Y3")
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

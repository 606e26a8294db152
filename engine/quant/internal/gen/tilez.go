package main

import "fmt"

// dot32z writes the AVX-512 tile kernel for rm rows of a plain 32-value format
// (Q8_0, Q4_0, Q5_0) at 512-bit width: each zmm register holds two columns' 8 lanes
// side by side, so one VPDPBUSD serves two outputs, and a block's weights, biases and
// scales are loaded once for all rm rows. The arithmetic per lane is dot32's: the same
// integer lanes, the same scale product dw*dx rounded to float32, the same fma, so the
// bits are the same; only the number of instructions and loads differs. (On Zen 4/5
// a 512-bit instruction costs no more than a 256-bit one; the 256-bit kernel was
// bound by its three loads per output and block.)
//
// Registers: BX args; SI, DI, R8, R9 activation rows (advancing a block at a time);
// R11 prepared block; R12 the column scales of this block, R13 ldw, R14 3*ldw; DX the
// rows' scales of this block, AX ldd, R10 3*ldd; CX blocks left. Accumulator (i, p),
// columns 2p and 2p+1 of row i, is Z(4i+2p); the odd registers below Z16 are
// temporaries until the end, where they take the upper halves.
func (g *gen) dot32z(rm int) string {
	name := fmt.Sprintf("dot32plainz_avx512_%d", rm)
	g.text(name, "p *dot32Args", 0)
	g.op("MOVQ p+0(FP), BX")
	for i := range rm {
		if i == 0 {
			g.op("MOVQ dot32Args_x(BX), SI")
			g.op("MOVQ dot32Args_ldx(BX), AX")
		} else {
			g.op("LEAQ (%s)(AX*1), %s", xrow[i-1], xrow[i])
		}
	}
	g.op("MOVQ dot32Args_col(BX), R11")
	g.op("MOVQ dot32Args_dw(BX), R12")
	g.op("MOVQ dot32Args_ldw(BX), R13")
	g.op("LEAQ (R13)(R13*2), R14")
	g.op("MOVQ dot32Args_dx(BX), DX")
	g.op("MOVQ dot32Args_ldd(BX), AX")
	g.op("LEAQ (AX)(AX*2), R10")
	g.op("MOVQ dot32Args_nb(BX), CX")
	for i := range rm {
		for p := range 2 {
			g.op("VXORPS %s, %s, %s", y(4*i+2*p), y(4*i+2*p), y(4*i+2*p))
		}
	}
	z := func(n int) string { return fmt.Sprintf("Z%d", n) }
	dwAddr := []string{"(R12)", "(R12)(R13*1)", "(R12)(R13*2)", "(R12)(R14*1)"}
	dxAddr := []string{"(DX)", "(DX)(AX*1)", "(DX)(AX*2)", "(DX)(R10*1)"}
	g.label(name + "_block")
	g.comment("this block's weight codes, biases and scales, columns paired in zmm registers")
	for p := range 2 {
		g.op("VMOVDQU32 %d(R11), %s", 128*p, y(16+p))
		g.op("VINSERTI64X4 $1, %d(R11), %s, %s", 128*p+64, z(16+p), z(16+p))
		g.op("VMOVDQU32 %d(R11), %s", 128*p+32, y(18+p))
		g.op("VINSERTI64X4 $1, %d(R11), %s, %s", 128*p+96, z(18+p), z(18+p))
		g.op("VBROADCASTSS %s, %s", dwAddr[2*p], z(20+p))
		g.op("VBROADCASTSS %s, %s", dwAddr[2*p+1], y(22+p))
		g.op("VINSERTF64X4 $1, %s, %s, %s", y(22+p), z(20+p), z(20+p))
	}
	for i := range rm {
		xr, dr := z(24+i%2), z(26+i%2)
		g.op("VBROADCASTI64X4 (%s), %s", xrow[i], xr)
		g.op("VBROADCASTSS %s, %s", dxAddr[i], dr)
		for p := range 2 {
			t, s, acc := z(4*i+2*p+1), z(28+(2*i+p)%4), z(4*i+2*p)
			g.op("VMOVDQA64 %s, %s", z(18+p), t)
			g.op("VPDPBUSD %s, %s, %s", z(16+p), xr, t)
			g.op("VCVTDQ2PS %s, %s", t, t)
			g.op("VMULPS %s, %s, %s", z(20+p), dr, s)
			g.op("VFMADD231PS %s, %s, %s", s, t, acc)
		}
	}
	for i := range rm {
		g.op("ADDQ $64, %s", xrow[i])
	}
	g.op("ADDQ $256, R11")
	g.op("ADDQ $4, R12")
	g.op("ADDQ $4, DX")
	g.op("DECQ CX")
	g.op("JNZ %s_block", name)
	g.comment("out[i][0:4] += the rows' reduced accumulators, under the column mask")
	g.op("MOVQ dot32Args_mask(BX), R13")
	g.op("MOVQ dot32Args_out(BX), DX")
	g.op("MOVQ dot32Args_ldo(BX), R14")
	for i := range rm {
		for p := range 2 {
			g.op("VEXTRACTF64X4 $1, %s, %s", z(4*i+2*p), y(4*i+2*p+1))
		}
		g.storeRow(4 * i)
	}
	g.op("VZEROUPPER")
	g.op("RET")
	return name
}

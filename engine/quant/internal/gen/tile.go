package main

import (
	"fmt"
)

// kind32 is a variant of the 32-value dot kernel.
type kind32 struct {
	name   string
	min    bool // also fold lane sums times min*dx (Q4_1, Q5_1)
	signed bool // AVX2 Q8_0: sign trick instead of unsigned activations and biases
	zmm    bool // AVX-512 plain formats at 512 bits (dot32z)
}

// dot32 writes the tile kernel for rm rows of a 32-value format.
//
// Registers: BX args; SI, DI, R8, R9 activation rows; R10 block offset in the rows;
// R11 prepared block; R12 scale products of this block; R13 blocks left in this group;
// CX blocks left; DX group offset of the scales. Accumulator (i, j) is Y(4i+j).
func (g *gen) dot32(is isa, k kind32, rm int) string {
	name := fmt.Sprintf("dot32%s_%s_%d", k.name, is.name, rm)
	g.text(name, "p *dot32Args", 0)
	const xs = 64 // activation block: codes plus 128, then 8 lane values
	G := group
	smOff := 4 * 4 * G * 4 // the min scale products follow the scale products
	g.op("MOVQ p+0(FP), BX")
	g.loadRows(rm, "dot32Args_x(BX)", "dot32Args_ldx(BX)")
	g.op("MOVQ dot32Args_col(BX), R11")
	g.op("MOVQ dot32Args_nb(BX), CX")
	g.op("XORQ R10, R10")
	g.op("XORQ DX, DX")
	for i := 0; i < 4*rm; i++ {
		g.op("VXORPS %s, %s, %s", y(i), y(i), y(i))
	}
	g.label(name + "_group")
	g.comment("s[i][j][b] = dw[j][b] * dx[i][b] for the next %d blocks", G)
	g.op("MOVQ dot32Args_s(BX), R12")
	g.op("MOVQ dot32Args_ldw(BX), R14")
	// Column scales into W registers, then per row one multiply per column. AVX-512
	// uses Y20..Y27 (free outside the block loop), AVX2 Y10..Y15.
	wreg := func(j int) string {
		if is.evex {
			return y(24 + j)
		}
		return y(10 + j)
	}
	dxr, prod := y(20), y(21)
	if !is.evex {
		dxr, prod = y(14), y(15)
	}
	products := func(field string, off int) {
		g.op("MOVQ dot32Args_%s(BX), AX", field)
		g.op("ADDQ DX, AX")
		for j := range 4 {
			g.op("VMOVUPS (AX), %s", wreg(j))
			if j < 3 {
				g.op("ADDQ R14, AX")
			}
		}
		g.op("MOVQ dot32Args_dx(BX), AX")
		g.op("ADDQ DX, AX")
		for i := range rm {
			g.op("VMOVUPS (AX), %s", dxr)
			for j := range 4 {
				g.op("VMULPS %s, %s, %s", wreg(j), dxr, prod)
				g.op("VMOVUPS %s, %d(R12)", prod, off+(4*i+j)*G*4)
			}
			if i < rm-1 {
				g.op("ADDQ dot32Args_ldd(BX), AX")
			}
		}
	}
	products("dw", 0)
	if k.min {
		products("dm", smOff)
	}
	g.op("MOVQ $%d, R13", G)
	g.op("CMPQ CX, R13")
	g.op("CMOVQLT CX, R13")
	g.op("SUBQ R13, CX")
	g.op("ADDQ $%d, DX", 4*G)
	g.label(name + "_block")
	if is.evex {
		g.dot32BlockEVEX(k, rm, smOff, G)
	} else {
		g.dot32BlockAVX2(k, rm, smOff, G)
	}
	g.op("ADDQ $%d, R10", xs)
	g.op("ADDQ $256, R11")
	g.op("ADDQ $4, R12")
	g.op("DECQ R13")
	g.op("JNZ %s_block", name)
	g.op("TESTQ CX, CX")
	g.op("JNZ %s_group", name)
	g.comment("out[i][0:4] += the rows' reduced accumulators, under the column mask")
	g.op("MOVQ dot32Args_mask(BX), R13")
	g.op("MOVQ dot32Args_out(BX), DX")
	g.op("MOVQ dot32Args_ldo(BX), R14")
	for i := range rm {
		g.storeRow(4 * i)
	}
	g.op("VZEROUPPER")
	g.op("RET")
	return name
}

// dot32BlockEVEX: activation codes (plus 128) are VPDPBUSD's unsigned operand, the
// prepared signed weight codes its signed one; the accumulator starts at the weight
// block's bias, -128 times the lane's sum of weight codes, so the lane ends exact.
func (g *gen) dot32BlockEVEX(k kind32, rm, smOff, G int) {
	for i := range rm {
		g.op("VMOVDQU32 (%s)(R10*1), %s", xrow[i], y(16+i))
	}
	for j := range 4 {
		for i := range rm {
			t := y(20 + (4*i+j)%4)
			acc := y(4*i + j)
			g.op("VMOVDQU32 %d(R11), %s", 64*j+32, t)
			g.op("VPDPBUSD %d(R11), %s, %s", 64*j, y(16+i), t)
			g.op("VCVTDQ2PS %s, %s", t, t)
			g.op("VFMADD231PS.BCST %d(R12), %s, %s", (4*i+j)*G*4, t, acc)
			if k.min {
				t2 := y(24 + (4*i+j)%4)
				g.op("VBROADCASTSS %d(R12), %s", smOff+(4*i+j)*G*4, t2)
				g.op("VFMADD231PS 32(%s)(R10*1), %s, %s", xrow[i], t2, acc)
			}
		}
	}
}

// dot32BlockAVX2: VPMADDUBSW of the unsigned activation codes and the signed weight
// codes makes pairs (at most 2*255*31, no saturation for codes of 5 bits), VPMADDWD by
// ones makes the lanes, and the bias corrects them. Q8_0's 8-bit codes would
// saturate, so its variant moves the weight's sign onto the signed activation code
// (VPSIGNB) and multiplies by |w|, needing no bias.
func (g *gen) dot32BlockAVX2(k kind32, rm, smOff, G int) {
	for i := range rm {
		g.op("VMOVDQU (%s)(R10*1), %s", xrow[i], y(8+i))
		if k.signed {
			g.op("VPXOR c80<>(SB), %s, %s", y(8+i), y(8+i))
		}
	}
	for j := range 4 {
		if k.signed {
			g.op("VPABSB %d(R11), Y14", 64*j)
		}
		for i := range rm {
			t, bc := y(10+(4*i+j)%2), y(12+(4*i+j)%2)
			acc := y(4*i + j)
			if k.signed {
				g.op("VPSIGNB %d(R11), %s, %s", 64*j, y(8+i), t)
				g.op("VPMADDUBSW %s, Y14, %s", t, t)
				g.op("VPMADDWD ones16<>(SB), %s, %s", t, t)
			} else {
				g.op("VPMADDUBSW %d(R11), %s, %s", 64*j, y(8+i), t)
				g.op("VPMADDWD ones16<>(SB), %s, %s", t, t)
				g.op("VPADDD %d(R11), %s, %s", 64*j+32, t, t)
			}
			g.op("VCVTDQ2PS %s, %s", t, t)
			g.op("VBROADCASTSS %d(R12), %s", (4*i+j)*G*4, bc)
			g.op("VFMADD231PS %s, %s, %s", bc, t, acc)
			if k.min {
				g.op("VBROADCASTSS %d(R12), %s", smOff+(4*i+j)*G*4, bc)
				g.op("VFMADD231PS 32(%s)(R10*1), %s, %s", xrow[i], bc, acc)
			}
		}
	}
}

// Prepared K-quant super-block of one column (576 bytes), and its place in the tile.
const (
	kCodes   = 0   // 256 unsigned codes
	kScales  = 256 // 8 vectors of 16 int16: the scale of each value pair of 32 values
	kCorr    = 512 // 16 int16: Q4_K/Q5_K mins per 16 values (each twice), Q6_K scales
	kD       = 544 // f32 d
	kDmin    = 548 // f32 dmin
	kColumn  = 576
	kTile    = 4 * kColumn
	q8kBytes = 292 // ggml Q8_K: f32 d, 256 int8 codes at 4, 16 int16 sums at 260
)

// dotK writes the tile kernel for rm rows of a K-quant; q6 selects Q6_K's offset
// (in the integer lanes) instead of Q4_K/Q5_K's mins (a second fma).
//
// Registers: BX args; SI, DI, R8, R9 activation rows; R10 super-block offset in the
// rows; R11 prepared super-block; R12 float accumulators (in memory, 32 bytes per
// output); CX super-blocks left. Integer lane accumulator (i, j) is Y(4i+j).
func (g *gen) dotK(is isa, q6 bool, rm int) string {
	kind := "min"
	if q6 {
		kind = "q6"
	}
	name := fmt.Sprintf("dotK%s_%s_%d", kind, is.name, rm)
	g.text(name, "p *dotKArgs", 0)
	g.op("MOVQ p+0(FP), BX")
	g.loadRows(rm, "dotKArgs_x(BX)", "dotKArgs_ldx(BX)")
	g.op("MOVQ dotKArgs_col(BX), R11")
	g.op("MOVQ dotKArgs_acc(BX), R12")
	g.op("MOVQ dotKArgs_nb(BX), CX")
	g.op("XORQ R10, R10")
	for i := 0; i < 4*rm; i++ {
		g.op("VPXOR %s, %s, %s", y(i), y(i), y(i))
		g.op("VMOVUPS %s, %d(R12)", y(i), 32*i)
	}
	code := func(j int) string { // the codes of column j's current 32 values
		if is.evex {
			return y(16 + j)
		}
		return y(8 + j)
	}
	g.label(name + "_sb")
	for c := range 8 {
		for j := range 4 {
			g.op("%s %d(R11), %s", is.movdqu(), j*kColumn+kCodes+32*c, code(j))
		}
		for j := range 4 {
			for i := range rm {
				acc := y(4*i + j)
				scale := j*kColumn + kScales + 32*c
				if is.evex {
					p := y(20 + (4*i+j)%4)
					g.op("VPMADDUBSW %d(%s)(R10*1), %s, %s", 4+32*c, xrow[i], code(j), p)
					g.op("VPDPWSSD %d(R11), %s, %s", scale, p, acc)
				} else {
					p := y(12 + (4*i+j)%2)
					g.op("VPMADDUBSW %d(%s)(R10*1), %s, %s", 4+32*c, xrow[i], code(j), p)
					g.op("VPMADDWD %d(R11), %s, %s", scale, p, p)
					g.op("VPADDD %s, %s, %s", p, acc, acc)
				}
			}
		}
	}
	g.comment("fold the super-block into the float accumulators")
	// Temporaries: M (offset lanes), S (scale product), T (broadcast dx), A (accumulator).
	m, s, t, a := y(24), y(25), y(26), y(27)
	if !is.evex {
		m, s, t, a = y(12), y(13), y(14), y(15)
	}
	for i := range rm {
		for j := range 4 {
			acc := y(4*i + j)
			col := j * kColumn
			accOff := 32 * (4*i + j)
			g.op("%s %d(R11), %s", is.movdqu(), col+kCorr, m)
			g.op("VPMADDWD 260(%s)(R10*1), %s, %s", xrow[i], m, m)
			g.op("VBROADCASTSS (%s)(R10*1), %s", xrow[i], t)
			g.op("VBROADCASTSS %d(R11), %s", col+kD, s)
			g.op("VMULPS %s, %s, %s", t, s, s)
			g.op("VMOVUPS %d(R12), %s", accOff, a)
			if q6 {
				g.op("VPSLLD $5, %s, %s", m, m)
				g.op("VPSUBD %s, %s, %s", m, acc, acc)
				g.op("VCVTDQ2PS %s, %s", acc, acc)
				g.op("VFMADD231PS %s, %s, %s", s, acc, a)
			} else {
				g.op("VCVTDQ2PS %s, %s", acc, acc)
				g.op("VCVTDQ2PS %s, %s", m, m)
				g.op("VFMADD231PS %s, %s, %s", s, acc, a)
				g.op("VBROADCASTSS %d(R11), %s", col+kDmin, s)
				g.op("VMULPS %s, %s, %s", t, s, s)
				g.op("VFNMADD231PS %s, %s, %s", s, m, a)
			}
			g.op("VMOVUPS %s, %d(R12)", a, accOff)
			g.op("VPXOR %s, %s, %s", acc, acc, acc)
		}
	}
	g.op("ADDQ $%d, R10", q8kBytes)
	g.op("ADDQ $%d, R11", kTile)
	g.op("DECQ CX")
	g.op("JNZ %s_sb", name)
	g.comment("out[i][0:4] += the rows' reduced accumulators, under the column mask")
	g.op("MOVQ dotKArgs_mask(BX), R13")
	g.op("MOVQ dotKArgs_out(BX), DX")
	g.op("MOVQ dotKArgs_ldo(BX), R14")
	for i := range rm {
		for j := range 4 {
			g.op("VMOVUPS %d(R12), %s", 32*(4*i+j), y(j))
		}
		g.storeRow(0)
	}
	g.op("VZEROUPPER")
	g.op("RET")
	return name
}

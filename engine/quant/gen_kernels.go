//go:build ignore

// gen_kernels writes kernels_amd64.s and kernels_gen_amd64.go: the tile kernels of
// the quantized products for AVX-512 (VNNI) and AVX2, and the AVX2 routines that
// prepare weight columns for them. Run with go generate.
//
// The work is split in two. A prep routine, one per weight type, unpacks 4 weight
// columns into a small buffer in one layout for all formats of a family: for the
// 32-value formats each block becomes 32 signed codes and 8 int32 lane biases (-128
// times the lane's sum of codes) plus an f32 scale (and min); for the K-quants each
// super-block becomes 256 unsigned codes, one vector of int16 scales per 32 values, a
// vector of offsets (mins, or Q6_K's scales) and f32 d and dmin. A dot routine per
// family then multiplies a tile of up to RM activation rows by the 4 columns,
// reading the buffer for every row. So each type has only an unpacker, and the tile
// loops are shared.
//
// Arithmetic (see dot.go; the portable kernels do the same): per block, lane l of the
// integer dot product covers values 4l..4l+3 of each 32, computed exactly (VPDPBUSD on
// the activation codes plus 128 and the signed weight codes, corrected by the bias,
// or VPMADDUBSW/VPMADDWD), converted to float32 and folded into the lane's float32
// accumulator with one VFMADD231PS by the block's scale product. The 8 lanes are
// summed by VHADDPS, VHADDPS, VADDPS: ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)).
package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"
)

// isa is one instruction set the dot kernels are written for. Both use 256-bit
// vectors only: a 512-bit instruction would switch off port 1's vector units for a
// while and so halve the throughput of the 256-bit code around it.
type isa struct {
	name  string
	maxRM int  // activation rows per tile
	evex  bool // AVX-512 (VL): VPDPBUSD/VPDPWSSD, 32 registers, masks, embedded broadcasts
}

// group is how many blocks' scale products one vector of float32 holds.
const group = 8

var (
	avx512 = isa{name: "avx512", maxRM: 4, evex: true}
	avx2   = isa{name: "avx2", maxRM: 2, evex: false}
)

// movdqu is the unaligned integer move that reaches every register of the set.
func (is isa) movdqu() string {
	if is.evex {
		return "VMOVDQU32"
	}
	return "VMOVDQU"
}

type gen struct{ b bytes.Buffer }

func (g *gen) op(format string, args ...any) { fmt.Fprintf(&g.b, "\t"+format+"\n", args...) }
func (g *gen) label(l string)                { fmt.Fprintf(&g.b, "%s:\n", l) }
func (g *gen) comment(format string, args ...any) {
	fmt.Fprintf(&g.b, "\t// "+format+"\n", args...)
}
func (g *gen) text(name, args string, frame int) {
	g.textRet(name, args, "", frame)
}

// textRet starts a function with a one-byte result (ret names it, e.g. "ok bool").
func (g *gen) textRet(name, args, ret string, frame int) {
	size := 8*strings.Count(args, ",") + 8
	sig := fmt.Sprintf("%s(%s)", name, args)
	if ret != "" {
		size++
		sig += " (" + ret + ")"
	}
	fmt.Fprintf(&g.b, "\n// func %s\nTEXT ·%s(SB), NOSPLIT, $%d-%d\n", sig, name, frame, size)
}

// Rows of the activation tile are addressed from these registers, plus the block
// offset in R10.
var xrow = []string{"SI", "DI", "R8", "R9"}

func y(n int) string { return fmt.Sprintf("Y%d", n) }
func x(n int) string { return fmt.Sprintf("X%d", n) }

// loadRows sets the activation row registers from a base and a byte stride.
func (g *gen) loadRows(rm int, base, stride string) {
	g.op("MOVQ %s, SI", base)
	g.op("MOVQ %s, AX", stride)
	for i := 1; i < rm; i++ {
		g.op("LEAQ (%s)(AX*1), %s", xrow[i-1], xrow[i])
	}
}

// storeRow reduces row i's four column accumulators (in Y registers a..a+3, all below
// Y16 because VHADDPS has no EVEX form) and adds them to the row's outputs at DX under
// the column mask at (R13). It clobbers the four registers.
func (g *gen) storeRow(a int) {
	g.op("VHADDPS %s, %s, %s", y(a+1), y(a), y(a))
	g.op("VHADDPS %s, %s, %s", y(a+3), y(a+2), y(a+2))
	g.op("VHADDPS %s, %s, %s", y(a+2), y(a), y(a))
	g.op("VEXTRACTF128 $1, %s, %s", y(a), x(a+1))
	g.op("VADDPS %s, %s, %s", x(a+1), x(a), x(a))
	g.op("VMOVDQU (R13), %s", x(a+1))
	g.op("VMASKMOVPS (DX), %s, %s", x(a+1), x(a+2))
	g.op("VADDPS %s, %s, %s", x(a), x(a+2), x(a))
	g.op("VMASKMOVPS %s, %s, (DX)", x(a), x(a+1))
	g.op("ADDQ R14, DX")
}

// kind32 is a variant of the 32-value dot kernel.
type kind32 struct {
	name   string
	min    bool // also fold lane sums times min*dx (Q4_1, Q5_1)
	signed bool // AVX2 Q8_0: sign trick instead of unsigned activations and biases
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

// Direct kernels: for a few activation rows (decode), read the weights' GGUF blocks in
// place, with no prepared copy, and walk every 4-column tile of the call in one go.
//
// Registers: BX args; SI, DI, R8, R9 activation rows; R10..R13 the tile's 4 weight
// columns, R14 the block's offset in them; CX blocks done; AX, DX scratch. The stack frame holds the scale
// products of the current group of blocks (s at 0, the min products at 1024) and
// the tile state (below).
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

// unpack32 is how a 32-value format's block becomes 32 signed codes in Y0 (values
// j and j+16 share byte j of qs: low and high nibble). Y1..Y3 are free.
type unpack32 struct {
	name  string
	bytes int  // block size
	qs    int  // offset of the nibbles (or Q8_0's codes)
	qh    int  // offset of the fifth bits, or -1
	min   bool // the block has an f16 min after d
	sub   int  // subtracted from the codes (8 or 16), or 0
	q8    bool // the codes are bytes, as they are
}

var unpackers32 = []unpack32{
	{name: "Q8_0", bytes: 34, qs: 2, qh: -1, q8: true},
	{name: "Q4_0", bytes: 18, qs: 2, qh: -1, sub: 8},
	{name: "Q4_1", bytes: 20, qs: 4, qh: -1, min: true},
	{name: "Q5_0", bytes: 22, qs: 6, qh: 2, sub: 16},
	{name: "Q5_1", bytes: 24, qs: 8, qh: 4, min: true},
}

// prep32 writes the AVX2 routine that prepares one column of a 32-value format:
// block b's 32 signed codes at dst+256b and their 8 lane biases (-128 times the sum
// of each 4 codes) at dst+256b+32, the f16 scales (and mins) at hd[b] (and hm[b]).
func (g *gen) prep32(u unpack32) string {
	name := "prep" + u.name
	g.text(name, "w *byte, nb int, dst *byte, hd *uint16, hm *uint16", 0)
	g.op("MOVQ w+0(FP), SI")
	g.op("MOVQ nb+8(FP), CX")
	g.op("MOVQ dst+16(FP), DI")
	g.op("MOVQ hd+24(FP), R8")
	g.op("MOVQ hm+32(FP), R9")
	g.op("VMOVDQU c01<>(SB), Y15")
	g.label(name + "_loop")
	if u.q8 {
		g.op("VMOVDQU %d(SI), Y0", u.qs)
	} else {
		// Both halves hold qs; shifting the upper half's dwords right by 4 brings each
		// byte's high nibble down (the bits shifted in are masked off).
		g.op("VBROADCASTI128 %d(SI), Y0", u.qs)
		g.op("VPSRLVD srl4<>(SB), Y0, Y0")
		g.op("VPAND c0f<>(SB), Y0, Y0")
	}
	if u.qh >= 0 {
		g.comment("fifth bits: byte k of Y1 gets byte k/8 of qh, tested against bit k%%8")
		g.op("VPBROADCASTD %d(SI), Y1", u.qh)
		g.op("VPSHUFB qhshuf<>(SB), Y1, Y1")
		g.op("VPAND qhbits<>(SB), Y1, Y1")
		g.op("VPCMPEQB qhbits<>(SB), Y1, Y1")
		g.op("VPAND c10<>(SB), Y1, Y1")
		g.op("VPOR Y1, Y0, Y0")
	}
	switch u.sub {
	case 8:
		g.op("VPSUBB c08<>(SB), Y0, Y0")
	case 16:
		g.op("VPSUBB c10<>(SB), Y0, Y0")
	}
	g.comment("bias: -128 * (sum of each 4 codes)")
	g.op("VPMADDUBSW Y0, Y15, Y1")
	g.op("VPMADDWD cm128<>(SB), Y1, Y1")
	g.op("VMOVDQU Y0, (DI)")
	g.op("VMOVDQU Y1, 32(DI)")
	g.op("MOVWLZX (SI), AX")
	g.op("MOVW AX, (R8)")
	if u.min {
		g.op("MOVWLZX 2(SI), AX")
		g.op("MOVW AX, (R9)")
		g.op("ADDQ $2, R9")
	}
	g.op("ADDQ $%d, SI", u.bytes)
	g.op("ADDQ $256, DI")
	g.op("ADDQ $2, R8")
	g.op("DECQ CX")
	g.op("JNZ %s_loop", name)
	g.op("VZEROUPPER")
	g.op("RET")
	return name
}

// cvtHalves converts n (a multiple of 8) f16 values to float32.
func (g *gen) cvtHalves() string {
	g.text("cvtHalves", "h *uint16, n int, dst *float32", 0)
	g.op("MOVQ h+0(FP), SI")
	g.op("MOVQ n+8(FP), CX")
	g.op("MOVQ dst+16(FP), DI")
	g.label("cvtHalves_loop")
	g.op("VCVTPH2PS (SI), Y0")
	g.op("VMOVUPS Y0, (DI)")
	g.op("ADDQ $16, SI")
	g.op("ADDQ $32, DI")
	g.op("SUBQ $8, CX")
	g.op("JGT cvtHalves_loop")
	g.op("VZEROUPPER")
	g.op("RET")
	return "cvtHalves"
}

// prepK writes the AVX2 routine that prepares one column of a K-quant: per
// super-block (at dst + 2304*b) 256 unsigned codes, 8 scale vectors, the offset
// vector and d, dmin, as the constants above lay them out.
func (g *gen) prepK(typ string) string {
	name := "prep" + typ
	g.text(name, "w *byte, nsb int, dst *byte", 0)
	g.op("MOVQ w+0(FP), SI")
	g.op("MOVQ nsb+8(FP), CX")
	g.op("MOVQ dst+16(FP), DI")
	g.op("VMOVDQU c0f<>(SB), Y15")
	g.op("VMOVDQU c10<>(SB), Y14")
	g.label(name + "_loop")
	bytes := map[string]int{"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}[typ]
	if typ == "Q6_K" {
		g.prepQ6K()
	} else {
		g.prepQ45K(typ == "Q5_K")
	}
	g.op("ADDQ $%d, SI", bytes)
	g.op("ADDQ $%d, DI", kTile)
	g.op("DECQ CX")
	g.op("JNZ %s_loop", name)
	g.op("VZEROUPPER")
	g.op("RET")
	return name
}

// bitTo4 moves bit p of each byte of src to bit 4 of dst (other bits garbage).
// Word shifts are fine: bit 4 of each byte comes from the same byte for p in 0..7.
func (g *gen) bitTo4(p int, src, dst string) {
	switch {
	case p < 4:
		g.op("VPSLLW $%d, %s, %s", 4-p, src, dst)
	case p > 4:
		g.op("VPSRLW $%d, %s, %s", p-4, src, dst)
	default:
		g.op("VMOVDQU %s, %s", src, dst)
	}
}

// prepQ45K: codes from nibbles (and Q5_K's fifth bits), then the 6-bit scales and
// mins, unpacked with ggml's masks: for j < 4, scale j and min j are the low 6 bits
// of bytes j and j+4; for j >= 4 their low 4 bits are the nibbles of byte j+4 and
// their top 2 bits the top bits of bytes j-4 and j.
func (g *gen) prepQ45K(q5 bool) {
	qs := 16
	if q5 {
		qs = 48
		g.op("VMOVDQU 16(SI), Y5") // qh: value l of sub-block s has bit s of byte l
	}
	for k := range 4 {
		g.op("VMOVDQU %d(SI), Y0", qs+32*k)
		g.op("VPAND Y15, Y0, Y1")
		g.op("VPSRLW $4, Y0, Y0")
		g.op("VPAND Y15, Y0, Y0")
		if q5 {
			g.bitTo4(2*k, "Y5", "Y2")
			g.op("VPAND Y14, Y2, Y2")
			g.op("VPOR Y2, Y1, Y1")
			g.bitTo4(2*k+1, "Y5", "Y2")
			g.op("VPAND Y14, Y2, Y2")
			g.op("VPOR Y2, Y0, Y0")
		}
		g.op("VMOVDQU Y1, %d(DI)", kCodes+64*k)
		g.op("VMOVDQU Y0, %d(DI)", kCodes+64*k+32)
	}
	// The scales and mins are built in registers: storing bytes and reading them back
	// as a vector would stall on store forwarding.
	g.op("MOVL 4(SI), AX")   // scale bytes 0..3
	g.op("MOVL 8(SI), R9")   // 4..7
	g.op("MOVL 12(SI), R10") // 8..11
	g.op("MOVL AX, R11")
	g.op("ANDL $0x3f3f3f3f, R11") // scales 0..3
	g.op("MOVL R9, R12")
	g.op("ANDL $0x3f3f3f3f, R12") // mins 0..3
	g.op("SHRL $6, AX")
	g.op("ANDL $0x03030303, AX")
	g.op("SHLL $4, AX")
	g.op("MOVL R10, R13")
	g.op("ANDL $0x0f0f0f0f, R13")
	g.op("ORL R13, AX") // scales 4..7
	g.op("SHRL $6, R9")
	g.op("ANDL $0x03030303, R9")
	g.op("SHLL $4, R9")
	g.op("SHRL $4, R10")
	g.op("ANDL $0x0f0f0f0f, R10")
	g.op("ORL R10, R9") // mins 4..7
	g.op("SHLQ $32, AX")
	g.op("ORQ R11, AX")
	g.op("SHLQ $32, R9")
	g.op("ORQ R12, R9")
	g.op("VMOVQ AX, X0")
	g.op("VPMOVZXBW X0, X0") // the 8 scales as words
	g.op("VMOVQ R9, X1")
	g.op("VPMOVZXBW X1, X1") // the 8 mins
	// Offsets: each min once per 16 values.
	g.op("VPUNPCKLWD X1, X1, X2")
	g.op("VPUNPCKHWD X1, X1, X3")
	g.op("VINSERTI128 $1, X3, Y2, Y2")
	g.op("VMOVDQU Y2, %d(DI)", kCorr)
	// Scale vector c: scale c in all 16 words.
	g.op("VINSERTI128 $1, X0, Y0, Y0")
	for c := range 8 {
		g.op("VPSHUFB bcw%d<>(SB), Y0, Y3", c)
		g.op("VMOVDQU Y3, %d(DI)", kScales+32*c)
	}
	g.op("VPBROADCASTD (SI), X0") // d and dmin
	g.op("VCVTPH2PS X0, X0")
	g.op("VMOVQ X0, %d(DI)", kD)
}

// prepQ6K: value 128h+32t+l has its low 4 bits in byte 64h+l+32(t&1) of ql (high
// nibble for t >= 2) and its top 2 in bits 2t of byte 32h+l of qh.
func (g *gen) prepQ6K() {
	g.op("VMOVDQU c30<>(SB), Y13")
	for h := range 2 {
		g.op("VMOVDQU %d(SI), Y0", 64*h)
		g.op("VMOVDQU %d(SI), Y1", 64*h+32)
		g.op("VMOVDQU %d(SI), Y2", 128+32*h)
		for t := range 4 {
			q := "Y0"
			if t&1 == 1 {
				q = "Y1"
			}
			if t >= 2 {
				g.op("VPSRLW $4, %s, Y3", q)
				g.op("VPAND Y15, Y3, Y3")
			} else {
				g.op("VPAND Y15, %s, Y3", q)
			}
			// Bits 2t, 2t+1 of qh to bits 4, 5.
			switch sh := 4 - 2*t; {
			case sh > 0:
				g.op("VPSLLW $%d, Y2, Y4", sh)
			case sh < 0:
				g.op("VPSRLW $%d, Y2, Y4", -sh)
			default:
				g.op("VMOVDQU Y2, Y4")
			}
			g.op("VPAND Y13, Y4, Y4")
			g.op("VPOR Y4, Y3, Y3")
			g.op("VMOVDQU Y3, %d(DI)", kCodes+128*h+32*t)
		}
	}
	g.op("VPMOVSXBW 192(SI), Y1") // the 16 scales
	g.op("VMOVDQU Y1, %d(DI)", kCorr)
	g.op("VPERMQ $0x44, Y1, Y2") // scales 0..7 in both halves
	g.op("VPERMQ $0xee, Y1, Y1") // 8..15
	for c := range 8 {
		src := "Y2"
		if c >= 4 {
			src = "Y1"
		}
		g.op("VPSHUFB q6pat%d<>(SB), %s, Y3", c%4, src) // scale 2c, then 2c+1
		g.op("VMOVDQU Y3, %d(DI)", kScales+32*c)
	}
	g.op("VPBROADCASTW 208(SI), X0")
	g.op("VCVTPH2PS X0, X0")
	g.op("VMOVSS X0, %d(DI)", kD)
}

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

// data emits a read-only constant of repeated bytes.
func (g *gen) data(name string, b []byte) {
	for i := 0; i < len(b); i += 8 {
		var v uint64
		for k := 7; k >= 0; k-- {
			v = v<<8 | uint64(b[i+k])
		}
		fmt.Fprintf(&g.b, "DATA %s<>+%d(SB)/8, $0x%016x\n", name, i, v)
	}
	fmt.Fprintf(&g.b, "GLOBL %s<>(SB), RODATA|NOPTR, $%d\n", name, len(b))
}

func rep(v byte, n int) []byte { return bytes.Repeat([]byte{v}, n) }

func words(v uint16, n int) []byte {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, byte(v), byte(v>>8))
	}
	return b
}

func (g *gen) constants() {
	g.data("c80", rep(0x80, 32))
	g.data("c01", rep(0x01, 32))
	g.data("c0f", rep(0x0f, 32))
	g.data("c08", rep(0x08, 32))
	g.data("c10", rep(0x10, 32))
	g.data("c30", rep(0x30, 32))
	g.data("ones16", words(1, 16))
	g.data("cm128", words(0xff80, 16))
	g.data("srl4", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0})
	var shuf, bits []byte
	for k := range 32 {
		shuf = append(shuf, byte(k/8%2+2*(k/16))) // within each 128-bit half: bytes 0,1 / 2,3
		bits = append(bits, 1<<(k%8))
	}
	g.data("qhshuf", shuf)
	g.data("qhbits", bits)
	g.data("packperm", []byte{0, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0,
		2, 0, 0, 0, 6, 0, 0, 0, 3, 0, 0, 0, 7, 0, 0, 0})
	g.data("absmask", []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
	g.data("i127", []byte{127, 0, 0, 0, 0, 0, 0, 0})
	g.data("f127", le32f(127))
	g.data("fm127", le32f(-127))
	g.data("f1", le32f(1))
	g.data("tiny", le32f(1e-30))
	for c := range 8 { // bcw<c>: word c of each 128-bit half in all its words
		var b []byte
		for range 16 {
			b = append(b, byte(2*c), byte(2*c+1))
		}
		g.data(fmt.Sprintf("bcw%d", c), b)
	}
	for k := range 4 { // q6pat<k>: word 2k in the low half's words, 2k+1 in the high's
		var b []byte
		for half := range 2 {
			for range 8 {
				w := 2*k + half
				b = append(b, byte(2*w), byte(2*w+1))
			}
		}
		g.data(fmt.Sprintf("q6pat%d", k), b)
	}

	for _, u := range unpackers32 {
		var idx []byte
		for k := range group {
			v := k * u.bytes
			idx = append(idx, byte(v), byte(v>>8), 0, 0)
		}
		g.data("gidx"+u.name, idx)
	}
	var mb, m8 []byte
	for n := 0; n <= 8; n++ {
		mb = append(mb, byte(1<<n-1))
	}
	for len(mb)%8 != 0 {
		mb = append(mb, 0)
	}
	for n := 0; n <= 8; n++ {
		for k := range 8 {
			var v byte
			if k < n {
				v = 0xff
			}
			m8 = append(m8, v, v, v, v)
		}
	}
	g.data("gmaskb", mb) // gmaskb[n]: a mask of the first n of 8 lanes
	g.data("gmask8", m8) // gmask8[n]: 8 dwords, the first n all ones
	var pd, pm []byte
	for half := range 2 {
		_ = half
		for k := range 16 {
			if k < 8 {
				pd = append(pd, byte(4*(k/2)+k%2))
				pm = append(pm, byte(4*(k/2)+k%2+2))
			} else {
				pd = append(pd, 0x80)
				pm = append(pm, 0x80)
			}
		}
	}
	g.data("pickd", pd) // the low half of each dword, packed into each 128-bit half's low 8 bytes
	g.data("pickm", pm) // the high half likewise
}

// le32f is a float32 constant's bytes, padded to 8.
func le32f(f float32) []byte {
	v := math.Float32bits(f)
	return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), 0, 0, 0, 0}
}

func main() {
	var g gen
	fmt.Fprintln(&g.b, "// Code generated by gen_kernels.go; DO NOT EDIT.")
	fmt.Fprintln(&g.b)
	fmt.Fprintln(&g.b, "#include \"textflag.h\"")
	fmt.Fprintln(&g.b, "#include \"go_asm.h\"")
	fmt.Fprintln(&g.b)
	g.constants()

	var decl bytes.Buffer
	fmt.Fprintln(&decl, "// Code generated by gen_kernels.go; DO NOT EDIT.")
	fmt.Fprintln(&decl)
	fmt.Fprintln(&decl, "package quant")
	fmt.Fprintln(&decl)
	declare := func(name, args string) {
		fmt.Fprintf(&decl, "//go:noescape\nfunc %s(%s)\n\n", name, args)
	}
	// Dispatch by switch, not through func values, which would make the argument
	// structs escape to the heap.
	var sw32, swK bytes.Buffer
	kinds := []kind32{{name: "plain"}, {name: "min", min: true}, {name: "q8", signed: true}}
	for _, is := range []isa{avx512, avx2} {
		for ki, k := range kinds {
			if k.signed && is.evex {
				continue
			}
			for rm := 1; rm <= is.maxRM; rm++ {
				n := g.dot32(is, k, rm)
				declare(n, "p *dot32Args")
				fmt.Fprintf(&sw32, "\tcase %d<<8 | %d<<4 | %d:\n\t\t%s(p)\n", boolInt(is.evex), ki, rm, n)
			}
		}
		for qi, q6 := range []bool{false, true} {
			for rm := 1; rm <= is.maxRM; rm++ {
				n := g.dotK(is, q6, rm)
				declare(n, "p *dotKArgs")
				fmt.Fprintf(&swK, "\tcase %d<<8 | %d<<4 | %d:\n\t\t%s(p)\n", boolInt(is.evex), qi, rm, n)
			}
		}
	}
	var swD bytes.Buffer
	for _, is := range []isa{avx512, avx2} {
		for ui, u := range unpackers32 {
			for rm := 1; rm <= is.maxRM; rm++ {
				n := g.direct(is, u, rm)
				declare(n, "p *directArgs")
				fmt.Fprintf(&swD, "\tcase %d<<8 | %d<<4 | %d:\n\t\t%s(p)\n", boolInt(is.evex), ui, rm, n)
			}
		}
	}
	for _, u := range unpackers32 {
		declare(g.prep32(u), "w *byte, nb int, dst *byte, hd *uint16, hm *uint16")
	}
	declare(g.cvtHalves(), "h *uint16, n int, dst *float32")
	fmt.Fprintf(&decl, "//go:noescape\nfunc %s(x *float32, nb int, dst *byte, d *float32, shift int, lanes int) (ok bool)\n\n", g.quantRow32())
	fmt.Fprintf(&decl, "//go:noescape\nfunc %s(x *float32, nb int, dst *byte) (ok bool)\n\n", g.quantRowK())
	for _, t := range []string{"Q4_K", "Q5_K", "Q6_K"} {
		declare(g.prepK(t), "w *byte, nsb int, dst *byte")
	}
	fmt.Fprintf(&decl, "// callDot32 runs the 32-value tile kernel for the instruction set (1 for AVX-512),\n")
	fmt.Fprintf(&decl, "// kind (0 plain, 1 min, 2 AVX2 Q8_0) and row count.\n")
	fmt.Fprintf(&decl, "func callDot32(evex, kind, rm int, p *dot32Args) {\n\tswitch evex<<8 | kind<<4 | rm {\n%s\tdefault:\n\t\tpanic(\"quant: no 32-value kernel for this tile\")\n\t}\n}\n\n", sw32.String())
	fmt.Fprintf(&decl, "// callDirect runs the direct kernel for the instruction set (1 for AVX-512),\n")
	fmt.Fprintf(&decl, "// format (index in directFormats) and row count.\n")
	fmt.Fprintf(&decl, "func callDirect(evex, format, rm int, p *directArgs) {\n\tswitch evex<<8 | format<<4 | rm {\n%s\tdefault:\n\t\tpanic(\"quant: no direct kernel for this tile\")\n\t}\n}\n\n", swD.String())
	fmt.Fprintf(&decl, "// callDotK runs the K-quant tile kernel for the instruction set (1 for AVX-512),\n")
	fmt.Fprintf(&decl, "// kind (0 Q4_K/Q5_K, 1 Q6_K) and row count.\n")
	fmt.Fprintf(&decl, "func callDotK(evex, kind, rm int, p *dotKArgs) {\n\tswitch evex<<8 | kind<<4 | rm {\n%s\tdefault:\n\t\tpanic(\"quant: no K-quant kernel for this tile\")\n\t}\n}\n", swK.String())
	write("kernels_amd64.s", g.b.Bytes())
	write("kernels_gen_amd64.go", decl.Bytes())
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func write(name string, b []byte) {
	if err := os.WriteFile(name, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

package main

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

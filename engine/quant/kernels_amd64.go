package quant

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/tandem-serve/tandem/gguf"
)

//go:generate go run ./internal/gen

// The assembly (kernels_amd64.s, from internal/gen) needs AVX2, FMA and F16C; the
// AVX-512 kernels also need the F, BW, VL and VNNI extensions.
var (
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
	hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
		cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI
)

var (
	avx512Kernels = &kernelSet{name: "avx512", cols: 4, row32: quantRow32Asm, rowK: quantRowKAsm,
		mul: func(w *Matrix, a *acts, j0, j1 int, out []float32, ldo int) {
			mulAsm(true, w, a, j0, j1, out, ldo)
		}}
	avx2Kernels = &kernelSet{name: "avx2", cols: 4, row32: quantRow32Asm, rowK: quantRowKAsm,
		mul: func(w *Matrix, a *acts, j0, j1 int, out []float32, ldo int) {
			mulAsm(false, w, a, j0, j1, out, ldo)
		}}
)

// quantRow32Asm is quantRow32Go in AVX2; rows with a NaN or an infinity go to the Go
// code, which gives them NaN scales.
func quantRow32Asm(x []float32, blocks []byte, d []float32, mode int) {
	shift, lanes := mode, 0
	if mode < 0 {
		shift, lanes = 0, 1
	}
	if !quantRow32(&x[0], len(d), &blocks[0], &d[0], shift, lanes) {
		quantRow32Go(x, blocks, d, mode)
	}
}

// quantRowKAsm is quantRowKGo in AVX2.
func quantRowKAsm(x []float32, blocks []byte) {
	if !quantRowK(&x[0], len(x)/qkK, &blocks[0]) {
		nanRowK(blocks)
	}
}

// supportedKernels are the implementations this CPU runs, fastest first.
func supportedKernels() []*kernelSet {
	var s []*kernelSet
	if hasAVX512 {
		s = append(s, avx512Kernels)
	}
	if hasAVX2 {
		s = append(s, avx2Kernels)
	}
	return append(s, portable)
}

// dot32Args is what a 32-value-format tile kernel reads; the assembly finds the
// fields through go_asm.h. Strides are in bytes.
type dot32Args struct {
	nb   int            // blocks per row
	x    unsafe.Pointer // activation row 0 of the tile (acts.x)
	ldx  int            // between activation rows
	dx   unsafe.Pointer // activation scales, row 0
	ldd  int            // between rows of dx
	col  unsafe.Pointer // prepared weights: block b of column c at col + 256b + 64c
	dw   unsafe.Pointer // column scales: column c at dw + c*ldw
	dm   unsafe.Pointer // column mins (Q4_1, Q5_1), likewise
	ldw  int
	out  unsafe.Pointer // output row 0, the tile's first column
	ldo  int            // between output rows
	mask unsafe.Pointer // 4 int32, -1 for the columns to write
	s    unsafe.Pointer // 2048 bytes of scratch for the scale products
}

// dotKArgs is what a K-quant tile kernel reads.
type dotKArgs struct {
	nb   int            // super-blocks per row
	x    unsafe.Pointer // Q8_K activation row 0 of the tile
	ldx  int            // between activation rows
	col  unsafe.Pointer // prepared weights: super-block b of column c at col + 2304b + 576c
	out  unsafe.Pointer // output row 0, the tile's first column
	ldo  int            // between output rows
	mask unsafe.Pointer // 4 int32, -1 for the columns to write
	acc  unsafe.Pointer // 512 bytes of scratch for the float accumulators
}

// colMasks[n] selects the first n of a tile's 4 columns.
var colMasks = [5][4]int32{{}, {-1}, {-1, -1}, {-1, -1, -1}, {-1, -1, -1, -1}}

// tileBuf is one goroutine's scratch: 4 prepared weight columns and the kernels' own.
type tileBuf struct {
	col    []byte
	dw, dm []float32
	hd, hm []uint16
	s      [512]float32
	acc    [128]float32
}

var tilePool = sync.Pool{New: func() any { return new(tileBuf) }}

// mulAsm runs the assembly over columns [j0, j1): the direct kernels for a few rows
// of a 32-value format, else the prepared-column tiles.
func mulAsm(evex bool, w *Matrix, a *acts, j0, j1 int, out []float32, ldo int) {
	rm := 2
	if evex {
		rm = 4
	}
	if formats[w.t].block == qkK && evex && directK && a.m == 1 {
		mulDirectK(w, a, j0, j1, out)
	} else if formats[w.t].block == qkK {
		mulPrepK(evex, rm, w, a, j0, j1, out, ldo)
	} else if a.m <= rm {
		// Few rows (decode): preparing the columns would cost more than it saves.
		mulDirect(evex, w, a, 0, a.m, j0, j1, out, ldo)
	} else if a.m <= batchDirectRows*rm {
		mulDirectBatch(evex, rm, w, a, j0, j1, out, ldo)
	} else {
		mulPrep32(evex, rm, w, a, j0, j1, out, ldo)
	}
}

// rowsBlock bounds the activation rows one pass over the columns reads (64 rows of
// K=1536 are 200 KB), so they stay in L2 however long the prompt; each pass prepares
// the columns again, which costs a few percent.
const rowsBlock = 64

// mulPrep32 walks the columns 4 at a time: it prepares them, then runs the tile kernel
// over every group of rm rows of the row block. A last partial group of columns
// repeats its last column and masks the writes.
func mulPrep32(evex bool, rm int, w *Matrix, a *acts, j0, j1 int, out []float32, ldo int) {
	tb := tilePool.Get().(*tileBuf)
	defer tilePool.Put(tb)
	f := formats[w.t]
	nbp := a.nbp
	tb.col = growSlice(tb.col, a.nb*256)
	tb.dw = growSlice(tb.dw, 4*nbp)
	tb.dm = growSlice(tb.dm, 4*nbp)
	tb.hd = growSlice(tb.hd, nbp)
	tb.hm = growSlice(tb.hm, nbp)
	kind := 0
	switch {
	case f.hasMin:
		kind = 1
	case w.t == gguf.TypeQ8_0 && !evex:
		kind = 2
	case evex:
		kind = 3 // the 512-bit twin of the plain kernel: same bits, fewer loads
	}
	for r0 := 0; r0 < a.m; r0 += rowsBlock {
		r1 := min(a.m, r0+rowsBlock)
		for jt := j0; jt < j1; jt += 4 {
			nc := min(4, j1-jt)
			for c := range 4 {
				row := w.row(jt + min(c, nc-1))
				prep32(w.t, &row[0], a.nb, &tb.col[64*c], &tb.hd[0], &tb.hm[0])
				cvtHalves(&tb.hd[0], nbp, &tb.dw[c*nbp])
				if f.hasMin {
					cvtHalves(&tb.hm[0], nbp, &tb.dm[c*nbp])
				}
			}
			for i0 := r0; i0 < r1; i0 += rm {
				p := dot32Args{
					nb: a.nb, x: unsafe.Pointer(&a.x[i0*a.nb*xBlock]), ldx: a.nb * xBlock,
					dx: unsafe.Pointer(&a.d[i0*nbp]), ldd: 4 * nbp,
					col: unsafe.Pointer(&tb.col[0]),
					dw:  unsafe.Pointer(&tb.dw[0]), dm: unsafe.Pointer(&tb.dm[0]), ldw: 4 * nbp,
					out: unsafe.Pointer(&out[i0*ldo+jt]), ldo: 4 * ldo,
					mask: unsafe.Pointer(&colMasks[nc]), s: unsafe.Pointer(&tb.s[0]),
				}
				callDot32(boolInt(evex), kind, min(rm, r1-i0), &p)
			}
		}
	}
}

// mulPrepK is mulPrep32 for the K-quants, at every row count.
func mulPrepK(evex bool, rm int, w *Matrix, a *acts, j0, j1 int, out []float32, ldo int) {
	tb := tilePool.Get().(*tileBuf)
	defer tilePool.Put(tb)
	tb.col = growSlice(tb.col, a.nb*4*576)
	kind := 0
	if w.t == gguf.TypeQ6_K {
		kind = 1
	}
	for r0 := 0; r0 < a.m; r0 += rowsBlock {
		r1 := min(a.m, r0+rowsBlock)
		for jt := j0; jt < j1; jt += 4 {
			nc := min(4, j1-jt)
			for c := range 4 {
				row := w.row(jt + min(c, nc-1))
				prepK(w.t, &row[0], a.nb, &tb.col[576*c])
			}
			for i0 := r0; i0 < r1; i0 += rm {
				p := dotKArgs{
					nb: a.nb, x: unsafe.Pointer(&a.q8k[i0*a.nb*q8kBytes]), ldx: a.nb * q8kBytes,
					col: unsafe.Pointer(&tb.col[0]),
					out: unsafe.Pointer(&out[i0*ldo+jt]), ldo: 4 * ldo,
					mask: unsafe.Pointer(&colMasks[nc]), acc: unsafe.Pointer(&tb.acc[0]),
				}
				callDotK(boolInt(evex), kind, min(rm, r1-i0), &p)
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func prep32(t gguf.Type, w *byte, nb int, dst *byte, hd, hm *uint16) {
	switch t {
	case gguf.TypeQ8_0:
		prepQ8_0(w, nb, dst, hd, hm)
	case gguf.TypeQ4_0:
		prepQ4_0(w, nb, dst, hd, hm)
	case gguf.TypeQ4_1:
		prepQ4_1(w, nb, dst, hd, hm)
	case gguf.TypeQ5_0:
		prepQ5_0(w, nb, dst, hd, hm)
	case gguf.TypeQ5_1:
		prepQ5_1(w, nb, dst, hd, hm)
	default:
		panic("quant: no 32-value prep for " + t.String())
	}
}

func prepK(t gguf.Type, w *byte, nsb int, dst *byte) {
	switch t {
	case gguf.TypeQ4_K:
		prepQ4_K(w, nsb, dst)
	case gguf.TypeQ5_K:
		prepQ5_K(w, nsb, dst)
	case gguf.TypeQ6_K:
		prepQ6_K(w, nsb, dst)
	default:
		panic("quant: no K-quant prep for " + t.String())
	}
}

// directArgs is what a direct kernel reads: activation rows as for dot32Args, and the
// weights in place, ntiles tiles of 4 columns.
type directArgs struct {
	nb      int            // blocks per row
	x       unsafe.Pointer // activation row 0
	ldx     int            // bytes between activation rows
	dx      unsafe.Pointer // activation scales, row 0
	ldd     int            // bytes between rows of dx
	w       unsafe.Pointer // the first tile's column 0 (a weight row's GGUF bytes)
	tstride int            // bytes from a tile's column 0 to the next tile's
	coff    [4]int         // bytes from a tile's column 0 to each of its columns
	ntiles  int
	out     unsafe.Pointer // output row 0, the first tile's first column
	ldo     int            // bytes between output rows
	mask    unsafe.Pointer // 4 int32, -1 for the columns to write
	pf      int            // one-row kernels: bytes from a column to where they prefetch
}

// prefetchBytes is how far ahead of the tile the one-row direct kernels prefetch, in
// whole tiles (at least one): on Zen 5, Q8_0 decode from memory ran 1.4 to 2 times as
// fast with 4 tiles of K=576 (10 KB) ahead as with 1, and Q4_K with 2 tiles of K=2048.
const prefetchBytes = 10 << 10

// prefetchAhead is directArgs.pf for tiles of tstride bytes.
func prefetchAhead(tstride int) int { return tstride * max(1, prefetchBytes/tstride) }

// directFormats are the formats with direct kernels, in the generator's order.
var directFormats = map[gguf.Type]int{
	gguf.TypeQ8_0: 0, gguf.TypeQ4_0: 1, gguf.TypeQ4_1: 2, gguf.TypeQ5_0: 3, gguf.TypeQ5_1: 4,
}

// directZ selects the 512-bit one-row direct kernels for Q8_0, Q4_0 and Q5_0 (a
// variable so that the benchmark can set them against the 256-bit ones).
var directZ = true

// directZFormats are those kernels, in the generator's order.
var directZFormats = map[gguf.Type]int{
	gguf.TypeQ8_0: len(directFormats), gguf.TypeQ4_0: len(directFormats) + 1, gguf.TypeQ5_0: len(directFormats) + 5,
}

// directK selects the one-row K-quant direct kernels (directk.go), a variable so that
// the benchmark can set them against preparing the columns.
var directK = true

// directKFormats are the K-quants' direct kernels, in the generator's order after
// the 32-value formats' and directz's.
var directKFormats = map[gguf.Type]int{
	gguf.TypeQ4_K: len(directFormats) + 2, gguf.TypeQ5_K: len(directFormats) + 3, gguf.TypeQ6_K: len(directFormats) + 4,
}

// mulDirectK is mulDirect for one row of a K-quant, with AVX-512: the super-blocks are
// read in place, so decode does not unpack every column into a prepared copy first.
func mulDirectK(w *Matrix, a *acts, j0, j1 int, out []float32) {
	rb := w.rowBytes
	p := directArgs{nb: a.nb, x: unsafe.Pointer(&a.q8k[0]), ldx: a.nb * q8kBytes, tstride: 4 * rb, pf: prefetchAhead(4 * rb)}
	f := directKFormats[w.t]
	if full := (j1 - j0) / 4; full > 0 {
		p.w = unsafe.Pointer(&w.data[j0*rb])
		p.coff = [4]int{0, rb, 2 * rb, 3 * rb}
		p.ntiles = full
		p.out = unsafe.Pointer(&out[j0])
		p.mask = unsafe.Pointer(&colMasks[4])
		callDirect(1, f, 1, &p)
	}
	if nc := (j1 - j0) % 4; nc > 0 {
		jt := j1 - nc
		p.w = unsafe.Pointer(&w.data[jt*rb])
		for c := range 4 {
			p.coff[c] = min(c, nc-1) * rb
		}
		p.ntiles = 1
		p.out = unsafe.Pointer(&out[jt])
		p.mask = unsafe.Pointer(&colMasks[nc])
		callDirect(1, f, 1, &p)
	}
}

// batchDirectRows bounds the row groups mulDirectBatch takes: up to 2 groups of rm
// rows (a decode batch of 8 with AVX-512). Beyond, preparing the columns once pays.
const batchDirectRows = 2

// batchCols is the columns of a chunk in mulDirectBatch: 32 rows of Q8_0 weights of
// K=1536 are 52 KB, which stay in L2 (1 MB) between the row groups.
const batchCols = 32

// mulDirectBatch is decode batched over a few groups of rows: each chunk of columns
// goes through the direct kernel once per group of rm rows, so the weights are read
// from memory once (the later groups find them in cache), and no column is prepared:
// at 8 rows, preparing the columns cost a third of the tile kernel's time.
func mulDirectBatch(evex bool, rm int, w *Matrix, a *acts, j0, j1 int, out []float32, ldo int) {
	for c0 := j0; c0 < j1; c0 += batchCols {
		c1 := min(j1, c0+batchCols)
		for i0 := 0; i0 < a.m; i0 += rm {
			mulDirect(evex, w, a, i0, min(a.m, i0+rm), c0, c1, out, ldo)
		}
	}
}

// mulDirect runs the direct kernel for activation rows [i0, i1) (at most the ISA's
// rm) over columns [j0, j1): all whole tiles of 4 in one call, then the last partial
// tile (its missing columns repeat its last one, unwritten).
func mulDirect(evex bool, w *Matrix, a *acts, i0, i1, j0, j1 int, out []float32, ldo int) {
	ev := boolInt(evex)
	rb := w.rowBytes
	p := directArgs{
		nb: a.nb, x: unsafe.Pointer(&a.x[i0*a.nb*xBlock]), ldx: a.nb * xBlock,
		dx: unsafe.Pointer(&a.d[i0*a.nbp]), ldd: 4 * a.nbp,
		tstride: 4 * rb, ldo: 4 * ldo, pf: prefetchAhead(4 * rb),
	}
	f := directFormats[w.t]
	if z, ok := directZFormats[w.t]; ok && evex && directZ && i1-i0 == 1 {
		f = z // at 512 bits (directz): same bits
	}
	o := out[i0*ldo:]
	if full := (j1 - j0) / 4; full > 0 {
		p.w = unsafe.Pointer(&w.data[j0*rb])
		p.coff = [4]int{0, rb, 2 * rb, 3 * rb}
		p.ntiles = full
		p.out = unsafe.Pointer(&o[j0])
		p.mask = unsafe.Pointer(&colMasks[4])
		callDirect(ev, f, i1-i0, &p)
	}
	if nc := (j1 - j0) % 4; nc > 0 {
		jt := j1 - nc
		p.w = unsafe.Pointer(&w.data[jt*rb])
		for c := range 4 {
			p.coff[c] = min(c, nc-1) * rb
		}
		p.ntiles = 1
		p.out = unsafe.Pointer(&o[jt])
		p.mask = unsafe.Pointer(&colMasks[nc])
		callDirect(ev, f, i1-i0, &p)
	}
}

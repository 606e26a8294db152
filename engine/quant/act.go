package quant

import (
	"encoding/binary"
	"math"

	"github.com/tandem-serve/tandem/gguf"
)

// acts is m activation rows quantized for one weight format, computed once per MulAdd
// and shared by every column and thread.
//
// For the 32-value formats a block is 32 int8 codes and an f32 scale: ggml's Q8_0 with
// a float32 instead of an f16 scale (a little more accurate, and free here), rounded
// to nearest even (as VCVTPS2DQ does). A block takes 64 bytes: the codes plus 128 (the
// unsigned operand VPDPBUSD wants), then 8 lane values, one per 4 codes: for Q4_1 and
// Q5_1 the lane sums as float32 (for the min term), for the others the lane sums times
// -offset as int32, the correction a kernel adds when it reads the weight codes as
// unsigned (offset 128 for Q8_0's flipped top bit, 8 for Q4_0, 16 for Q5_0). The
// scales are a separate array, each row padded to a multiple of 16 so the kernels can
// load 16 at a time.
//
// For the K-quants each 256 values are one ggml Q8_K block (f32 scale, 256 codes, sums
// of 16), exactly as ggml's quantize_row_q8_K_ref makes them.
type acts struct {
	m, k int
	nb   int // blocks per row

	x   []byte    // 32-value formats: m rows of nb blocks of xBlock bytes
	nbp int       // floats per row of d: nb rounded up to 16
	d   []float32 // m rows of nbp scales

	q8k []byte // K-quants: m rows of nb Q8_K blocks
}

const (
	xBlock   = 64  // bytes per 32-value activation block: codes, then lane values
	q8kBytes = 292 // a Q8_K block: f32 d, 256 int8, 16 int16 sums

	// tinyBlock: a block whose largest magnitude is below it codes as all zeros, so
	// that 1/scale cannot overflow (from subnormal values) into codes that Go and
	// VCVTPS2DQ would make differently. Such values contribute nothing anyway.
	tinyBlock = 1e-30
)

// laneMode says what an activation block's lane values are: -1 for float32 lane sums
// (formats with a min), else the log2 of the offset the lane sums are multiplied by.
func laneMode(t gguf.Type) int {
	switch t {
	case gguf.TypeQ8_0:
		return 7
	case gguf.TypeQ4_0:
		return 3
	case gguf.TypeQ5_0:
		return 4
	}
	return -1
}

// nonFinite reports whether x holds a NaN or an infinity; such a row gets a NaN scale,
// so its outputs are NaN rather than finite nonsense.
func nonFinite(x []float32) bool {
	for _, v := range x {
		if v-v != 0 {
			return true
		}
	}
	return false
}

func growSlice[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// rowQuantizer32 codes one activation row into 32-value blocks and their scales;
// mode is laneMode's.
type rowQuantizer32 func(x []float32, blocks []byte, d []float32, mode int)

// quantize32 codes m rows for a 32-value format, with the row quantizer of the active
// kernels (quantRow32Go or its assembly twin).
func (a *acts) quantize32(m int, x []float32, ldx, k int, mode int, row32 rowQuantizer32) {
	a.m, a.k, a.nb = m, k, k/qk
	a.nbp = (a.nb + 15) &^ 15
	a.x = growSlice(a.x, m*a.nb*xBlock)
	a.d = growSlice(a.d, m*a.nbp)
	for i := range m {
		row32(x[i*ldx:i*ldx+k], a.x[i*a.nb*xBlock:(i+1)*a.nb*xBlock], a.d[i*a.nbp:i*a.nbp+a.nb], mode)
	}
}

// quantRow32Go codes one row: per block of 32, code = round(x*127/amax) to nearest
// even, scale amax/127. A row holding a NaN or an infinity gets NaN scales and zero
// codes, so its outputs are NaN rather than finite nonsense.
func quantRow32Go(row []float32, blocks []byte, d []float32, mode int) {
	bad := nonFinite(row)
	for b := range d {
		xs := row[b*qk : b*qk+qk]
		blk := blocks[b*xBlock : (b+1)*xBlock]
		var q [qk]int32
		scale := float32(math.NaN())
		if !bad {
			_, amax := absMax(xs)
			if amax < tinyBlock {
				amax = 0
			}
			scale = amax / 127
			id := inverse(scale)
			for j, v := range xs {
				q[j] = nearestInt(float32(v * id))
			}
		}
		d[b] = scale
		for j, c := range q {
			blk[j] = uint8(c) ^ 0x80
		}
		for l := range 8 {
			s := q[4*l] + q[4*l+1] + q[4*l+2] + q[4*l+3]
			v := math.Float32bits(float32(s))
			if mode >= 0 {
				v = uint32(-(s << mode))
			}
			binary.LittleEndian.PutUint32(blk[qk+4*l:], v)
		}
	}
}

// lane32 is lane sum l of block b of row i.
func (a *acts) lane32(i, b, l int) float32 {
	return math.Float32frombits(le32(a.x[(i*a.nb+b)*xBlock+qk+4*l:]))
}

// quantizeK codes m rows for a K-quant, with the row quantizer of the active kernels
// (quantRowKGo or its assembly twin).
func (a *acts) quantizeK(m int, x []float32, ldx, k int, rowK func(x []float32, blocks []byte)) {
	a.m, a.k, a.nb = m, k, k/qkK
	a.q8k = growSlice(a.q8k, m*a.nb*q8kBytes)
	for i := range m {
		rowK(x[i*ldx:i*ldx+k], a.q8k[i*a.nb*q8kBytes:(i+1)*a.nb*q8kBytes])
	}
}

// quantRowKGo makes each 256 values of a row a Q8_K block, as ggml's
// quantize_row_q8_K_ref; a row holding a NaN or an infinity gets NaN scales.
func quantRowKGo(row []float32, blocks []byte) {
	if nonFinite(row) {
		nanRowK(blocks)
		return
	}
	for b := 0; b < len(row)/qkK; b++ {
		quantQ8K(row[b*qkK:(b+1)*qkK], blocks[b*q8kBytes:(b+1)*q8kBytes])
	}
}

// nanRowK fills a row's Q8_K blocks with NaN scales and zero codes.
func nanRowK(blocks []byte) {
	clear(blocks)
	for b := 0; b < len(blocks); b += q8kBytes {
		binary.LittleEndian.PutUint32(blocks[b:], math.Float32bits(float32(math.NaN())))
	}
}

// blockK is Q8_K block b of row i.
func (a *acts) blockK(i, b int) []byte { return a.q8k[(i*a.nb+b)*q8kBytes:][:q8kBytes] }

package quant

import (
	"encoding/binary"
	"math"
)

// acts is m activation rows quantized for one weight format, computed once per MulAdd
// and shared by every column and thread.
//
// For the 32-value formats a block is 32 int8 codes and an f32 scale: ggml's Q8_0,
// with a float32 scale instead of f16 (a little more accurate, and free here). The
// codes are stored plus 128, as the unsigned operand of VPDPBUSD wants them; the min
// formats (Q4_1, Q5_1) follow each block's codes with its 8 lane sums as float32. The
// scales are a separate array, each row padded to a multiple of 16, so the kernels
// can load 16 at a time.
//
// For the K-quants each 256 values are one ggml Q8_K block (f32 scale, 256 codes,
// sums of 16), exactly as ggml's quantize_row_q8_K_ref makes them.
type acts struct {
	m, k int
	nb   int // blocks per row

	xs  int       // 32-value formats: bytes per block in x, 32 or 64 with lane sums
	x   []byte    // m rows of nb blocks
	nbp int       // floats per row of d: nb rounded up to 16
	d   []float32 // m rows of nbp scales

	q8k []byte // K-quants: m rows of nb Q8_K blocks
}

const q8kBytes = 292 // a Q8_K block: f32 d, 256 int8, 16 int16 sums

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

// quantize32 codes each block as round(x*127/amax), ties away from zero, with the
// scale amax/127; lane sums are kept for the formats with a min.
func (a *acts) quantize32(m int, x []float32, ldx, k int, lanes bool) {
	a.m, a.k, a.nb = m, k, k/qk
	a.xs = qk
	if lanes {
		a.xs = 2 * qk
	}
	a.nbp = (a.nb + 15) &^ 15
	a.x = growSlice(a.x, m*a.nb*a.xs)
	a.d = growSlice(a.d, m*a.nbp)
	for i := range m {
		row := x[i*ldx : i*ldx+k]
		bad := nonFinite(row)
		for b := range a.nb {
			xs := row[b*qk : b*qk+qk]
			_, amax := absMax(xs)
			d := amax / 127
			id := inverse(d)
			blk := a.x[(i*a.nb+b)*a.xs:][:a.xs]
			var q [qk]int8
			if bad {
				d = float32(math.NaN())
			} else {
				for j, v := range xs {
					q[j] = int8(math.Round(float64(v * id)))
				}
			}
			a.d[i*a.nbp+b] = d
			for j, c := range q {
				blk[j] = uint8(c) ^ 0x80
			}
			if lanes {
				for l := range 8 {
					s := int32(q[4*l]) + int32(q[4*l+1]) + int32(q[4*l+2]) + int32(q[4*l+3])
					binary.LittleEndian.PutUint32(blk[qk+4*l:], math.Float32bits(float32(s)))
				}
			}
		}
	}
}

// lane32 is lane sum l of block b of row i.
func (a *acts) lane32(i, b, l int) float32 {
	return math.Float32frombits(le32(a.x[(i*a.nb+b)*a.xs+qk+4*l:]))
}

// quantizeK makes each 256 values a Q8_K block, as ggml's quantize_row_q8_K_ref.
func (a *acts) quantizeK(m int, x []float32, ldx, k int) {
	a.m, a.k, a.nb = m, k, k/qkK
	a.q8k = growSlice(a.q8k, m*a.nb*q8kBytes)
	for i := range m {
		row := x[i*ldx : i*ldx+k]
		bad := nonFinite(row)
		for b := range a.nb {
			blk := a.q8k[(i*a.nb+b)*q8kBytes:][:q8kBytes]
			if bad {
				clear(blk)
				binary.LittleEndian.PutUint32(blk, math.Float32bits(float32(math.NaN())))
				continue
			}
			quantQ8K(row[b*qkK:(b+1)*qkK], blk)
		}
	}
}

// blockK is Q8_K block b of row i.
func (a *acts) blockK(i, b int) []byte { return a.q8k[(i*a.nb+b)*q8kBytes:][:q8kBytes] }

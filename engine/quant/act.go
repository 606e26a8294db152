package quant

import "math"

// acts is m activation rows quantized for one weight format, computed once per MulAdd
// and shared by every column and thread.
//
// For the 32-value formats a block is 32 int8 codes and an f32 scale (ggml's Q8_0
// with a float32 instead of an f16 scale: a little more accurate, and free here); for
// the K-quants a 256-value block is ggml's Q8_K (int8 codes, f32 scale, sums of 16).
type acts struct {
	m, k int
	q    []int8    // m*k codes, row after row
	d    []float32 // per block: the scale (per 32 values, or per 256 for K-quants)

	// 32-value formats only, per block and lane (8 per block):
	bias []int32   // -offset * the lane's sum of codes: the correction the assembly adds when it reads weights as unsigned bytes (offset 8 for Q4_0, 16 for Q5_0, 128 for Q8_0)
	lsum []float32 // the lane's sum of codes, for the min term of Q4_1 and Q5_1

	// K-quants only:
	bsums []int16 // per 16 values, the sum of their codes
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

// grow sizes the buffers for m rows of k values in the given block size.
func (a *acts) grow(m, k, block int) {
	a.m, a.k = m, k
	nb := m * k / block
	a.q = growSlice(a.q, m*k)
	a.d = growSlice(a.d, nb)
	if block == qk {
		a.bias = growSlice(a.bias, 8*nb)
		a.lsum = growSlice(a.lsum, 8*nb)
	} else {
		a.bsums = growSlice(a.bsums, m*k/16)
	}
}

func growSlice[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// quantize32 codes each block as round(x*127/amax), ties away from zero, keeping the
// scale amax/127 in float32, and records the lane sums the kernels need. offset is the
// weight format's: the asm adds bias to correct its unsigned reading of the weights.
func (a *acts) quantize32(m int, x []float32, ldx, k int, offset int32) {
	a.grow(m, k, qk)
	nb := k / qk
	for i := range m {
		row := x[i*ldx : i*ldx+k]
		bad := nonFinite(row)
		for b := range nb {
			xs := row[b*qk : b*qk+qk]
			_, amax := absMax(xs)
			d := amax / 127
			id := inverse(d)
			blk := i*nb + b
			q := a.q[blk*qk : blk*qk+qk]
			if bad {
				d = float32(math.NaN())
				clear(q)
			} else {
				for j, v := range xs {
					q[j] = int8(math.Round(float64(v * id)))
				}
			}
			a.d[blk] = d
			for l := range 8 {
				s := int32(q[4*l]) + int32(q[4*l+1]) + int32(q[4*l+2]) + int32(q[4*l+3])
				a.bias[8*blk+l] = -offset * s
				a.lsum[8*blk+l] = float32(s)
			}
		}
	}
}

// quantizeK codes each 256 values as ggml's quantize_row_q8_K_ref does.
func (a *acts) quantizeK(m int, x []float32, ldx, k int) {
	a.grow(m, k, qkK)
	nb := k / qkK
	for i := range m {
		row := x[i*ldx : i*ldx+k]
		bad := nonFinite(row)
		for b := range nb {
			xs := row[b*qkK : b*qkK+qkK]
			blk := i*nb + b
			q := a.q[blk*qkK : blk*qkK+qkK]
			maxv, amax := absMax(xs)
			var d float32
			if amax != 0 && !bad {
				iscale := -127 / maxv
				d = 1 / iscale
				for j, v := range xs {
					q[j] = int8(min(127, nearestInt(float32(iscale*v))))
				}
			} else {
				clear(q)
				if bad {
					d = float32(math.NaN())
				}
			}
			a.d[blk] = d
			for j := range qkK / 16 {
				var s int16
				for _, c := range q[16*j : 16*j+16] {
					s += int16(c)
				}
				a.bsums[blk*16+j] = s
			}
		}
	}
}

package quant

import (
	"math"

	"github.com/tandem-serve/tandem/gguf"
)

// format is what the kernels need to know of a weight type.
type format struct {
	block int // 32, or 256 for the K-quants
	// hasMin: value = d*q + min (Q4_1, Q5_1; Q4_K and Q5_K per sub-block).
	hasMin bool
	decode func(b []byte, r *decodedRow, blk int) // one block into r
}

var formats = map[gguf.Type]format{
	gguf.TypeQ8_0: {qk, false, decodeQ8_0},
	gguf.TypeQ4_0: {qk, false, decodeQ4_0},
	gguf.TypeQ5_0: {qk, false, decodeQ5_0},
	gguf.TypeQ4_1: {qk, true, decodeQ4_1},
	gguf.TypeQ5_1: {qk, true, decodeQ5_1},
	gguf.TypeQ4_K: {qkK, true, decodeQ4K},
	gguf.TypeQ5_K: {qkK, true, decodeQ5K},
	gguf.TypeQ6_K: {qkK, false, decodeQ6K},
}

// decodedRow is one weight row unpacked for the portable kernels: per value its code
// (the signed weight for Q8_0, Q4_0 and Q5_0; unsigned for the others), and per block
// the scales. Unpacking once per row serves every activation row.
type decodedRow struct {
	codes []int16
	d, dm []float32 // per block: scale and min scale (dmin for K-quants)
	sc    []int32   // K-quants, per 16 values: the sub-block scale
	mn    []int32   // Q4_K and Q5_K, per 32 values: the sub-block min
}

func (r *decodedRow) reset(k, block int) {
	nb := k / block
	r.codes = growSlice(r.codes, k)
	r.d = growSlice(r.d, nb)
	r.dm = growSlice(r.dm, nb)
	r.sc = growSlice(r.sc, k/16)
	r.mn = growSlice(r.mn, k/32)
}

func decodeQ8_0(b []byte, r *decodedRow, blk int) {
	r.d[blk] = f16ToF32(le16(b))
	for j, q := range b[2:34] {
		r.codes[blk*qk+j] = int16(int8(q))
	}
}

func decodeQ4_0(b []byte, r *decodedRow, blk int) {
	r.d[blk] = f16ToF32(le16(b))
	c := r.codes[blk*qk : blk*qk+qk]
	for j, q := range b[2:18] {
		c[j], c[j+16] = int16(q&0xf)-8, int16(q>>4)-8
	}
}

func decodeQ5_0(b []byte, r *decodedRow, blk int) {
	r.d[blk] = f16ToF32(le16(b))
	qh := le32(b[2:])
	c := r.codes[blk*qk : blk*qk+qk]
	for j, q := range b[6:22] {
		c[j] = int16(q&0xf|uint8(qh>>j&1)<<4) - 16
		c[j+16] = int16(q>>4|uint8(qh>>(j+16)&1)<<4) - 16
	}
}

func decodeQ4_1(b []byte, r *decodedRow, blk int) {
	r.d[blk], r.dm[blk] = f16ToF32(le16(b)), f16ToF32(le16(b[2:]))
	c := r.codes[blk*qk : blk*qk+qk]
	for j, q := range b[4:20] {
		c[j], c[j+16] = int16(q&0xf), int16(q>>4)
	}
}

func decodeQ5_1(b []byte, r *decodedRow, blk int) {
	r.d[blk], r.dm[blk] = f16ToF32(le16(b)), f16ToF32(le16(b[2:]))
	qh := le32(b[4:])
	c := r.codes[blk*qk : blk*qk+qk]
	for j, q := range b[8:24] {
		c[j] = int16(q&0xf | uint8(qh>>j&1)<<4)
		c[j+16] = int16(q>>4 | uint8(qh>>(j+16)&1)<<4)
	}
}

func decodeK4Scales(b []byte, r *decodedRow, blk int) {
	r.d[blk], r.dm[blk] = f16ToF32(le16(b)), f16ToF32(le16(b[2:]))
	for j := range 8 {
		sc, m := scaleMinK4(j, b[4:16])
		r.sc[blk*16+2*j], r.sc[blk*16+2*j+1] = int32(sc), int32(sc)
		r.mn[blk*8+j] = int32(m)
	}
}

func decodeQ4K(b []byte, r *decodedRow, blk int) {
	decodeK4Scales(b, r, blk)
	c := r.codes[blk*qkK : blk*qkK+qkK]
	for k := range 4 {
		for l, q := range b[16+32*k : 48+32*k] {
			c[64*k+l], c[64*k+l+32] = int16(q&0xf), int16(q>>4)
		}
	}
}

func decodeQ5K(b []byte, r *decodedRow, blk int) {
	decodeK4Scales(b, r, blk)
	qh := b[16:48]
	c := r.codes[blk*qkK : blk*qkK+qkK]
	for k := range 4 {
		for l, q := range b[48+32*k : 80+32*k] {
			c[64*k+l] = int16(q&0xf | (qh[l]>>(2*k)&1)<<4)
			c[64*k+l+32] = int16(q>>4 | (qh[l]>>(2*k+1)&1)<<4)
		}
	}
}

func decodeQ6K(b []byte, r *decodedRow, blk int) {
	r.d[blk] = f16ToF32(le16(b[208:]))
	for j, s := range b[192:208] {
		r.sc[blk*16+j] = int32(int8(s))
	}
	c := r.codes[blk*qkK : blk*qkK+qkK]
	for h := range 2 {
		for t := range 4 {
			for l := range 32 {
				c[128*h+32*t+l] = int16(q6Value(b[0:128], b[128:192], h, t, l))
			}
		}
	}
}

// mulGo is the portable kernel and the reference for the assembly: out[i*ldo+j] +=
// row i of a times weight row j, for i < a.m and j0 <= j < j1.
func mulGo(w *Matrix, a *acts, j0, j1 int, out []float32, ldo int) {
	f := formats[w.t]
	var r decodedRow
	r.reset(w.k, f.block)
	bb := w.t.BlockBytes()
	nb := w.k / f.block
	for j := j0; j < j1; j++ {
		row := w.row(j)
		for b := range nb {
			f.decode(row[b*bb:(b+1)*bb], &r, b)
		}
		for i := range a.m {
			var acc [8]float32
			if f.block == qk {
				dot32(&acc, &r, a, i, f.hasMin)
			} else {
				dotK(&acc, &r, a, i, w.t == gguf.TypeQ6_K)
			}
			out[i*ldo+j] += reduce8(&acc)
		}
	}
}

// dot32 folds one activation row into acc for a 32-value format.
func dot32(acc *[8]float32, r *decodedRow, a *acts, i int, hasMin bool) {
	for b := range a.nb {
		c := r.codes[b*qk : b*qk+qk]
		xb := a.x[(i*a.nb+b)*xBlock:][:qk] // codes plus 128
		dx := a.d[i*a.nbp+b]
		s := r.d[b] * dx
		for l := range 8 {
			var lane int32
			for k := 4 * l; k < 4*l+4; k++ {
				lane += int32(c[k]) * (int32(xb[k]) - 128)
			}
			acc[l] = fma32(float32(lane), s, acc[l])
		}
		if hasMin {
			sm := r.dm[b] * dx
			for l := range 8 {
				acc[l] = fma32(a.lane32(i, b, l), sm, acc[l])
			}
		}
	}
}

// dotK folds one activation row into acc for a K-quant. Per super-block, lane l sums
// scale*code*x over values 4l..4l+3 of each 32; the offsets come from the activation
// sums: Q4_K and Q5_K subtract min*sum per 32-value sub-block (lane l takes sub-block
// l) with a second fma, Q6_K subtracts 32*scale*sum per 16 (lane l takes sub-blocks 2l
// and 2l+1) in the integer lane.
func dotK(acc *[8]float32, r *decodedRow, a *acts, i int, q6 bool) {
	for b := range a.nb {
		blk := a.blockK(i, b)
		dx := math.Float32frombits(le32(blk))
		x := blk[4 : 4+qkK]
		var bs [16]int32
		for j := range bs {
			bs[j] = int32(int16(le16(blk[4+qkK+2*j:])))
		}
		c := r.codes[b*qkK : b*qkK+qkK]
		sc := r.sc[b*16 : b*16+16]
		var lane [8]int32
		for run := range 8 {
			for l := range 8 {
				for k := 32*run + 4*l; k < 32*run+4*l+4; k++ {
					lane[l] += sc[k/16] * int32(c[k]) * int32(int8(x[k]))
				}
			}
		}
		s := r.d[b] * dx
		if q6 {
			for l := range 8 {
				m := sc[2*l]*bs[2*l] + sc[2*l+1]*bs[2*l+1]
				acc[l] = fma32(float32(lane[l]-32*m), s, acc[l])
			}
			continue
		}
		sm := r.dm[b] * dx
		mn := r.mn[b*8 : b*8+8]
		for l := range 8 {
			acc[l] = fma32(float32(lane[l]), s, acc[l])
			acc[l] = fma32(-float32(mn[l]*(bs[2*l]+bs[2*l+1])), sm, acc[l])
		}
	}
}

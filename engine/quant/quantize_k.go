package quant

import (
	"encoding/binary"
	"math"
)

// The K-quant reference quantizers, step for step as ggml's quantize_row_q{4,5,6,8}_K_ref
// so the blocks are byte-identical. Every product that feeds a sum is converted to
// float32 first, which stops Go from fusing it into an FMA that C does not do.

// groupMaxEps is ggml's GROUP_MAX_EPS: a group whose largest magnitude is below it is
// all zeros.
const groupMaxEps = 1e-15

// nearestInt rounds to nearest, ties to even, by ggml's trick of adding 1.5*2^23 and
// reading the mantissa; ggml asserts |f| <= 4194303, and within that it is exact.
func nearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x7fffff) - 0x400000
}

func sqrt32(v float32) float32 { return float32(math.Sqrt(float64(v))) }

// makeQKX2 is ggml's make_qkx2_quants without the use_mad option: it chooses a scale
// and a non-positive min for x (weighted by w) and codes L in 0..nmax, trying nstep+1
// scales around the range's. It returns the scale and the min negated.
func makeQKX2(x, w []float32, nmax int32, L, aux []uint8, rmin, rdelta float32, nstep int) (scale, negMin float32) {
	n := len(x)
	lo, hi := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < lo {
			lo = x[i]
		}
		if x[i] > hi {
			hi = x[i]
		}
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		for i := range n {
			L[i] = 0
		}
		return 0, -lo
	}
	fmax := float32(nmax)
	iscale := fmax / (hi - lo)
	scale = 1 / iscale
	var best float32
	for i := range n {
		l := min(max(nearestInt(float32(iscale*(x[i]-lo))), 0), nmax)
		L[i] = uint8(l)
		diff := float32(float32(scale*float32(l))+lo) - x[i]
		best += float32(w[i] * float32(diff*diff))
	}
	for is := 0; is <= nstep; is++ {
		iscale = (float32(rmin+float32(rdelta*float32(is))) + fmax) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := range n {
			l := min(max(nearestInt(float32(iscale*(x[i]-lo))), 0), nmax)
			aux[i] = uint8(l)
			fl := float32(l)
			wl := float32(w[i] * fl)
			sumL += wl
			sumL2 += float32(wl * fl)
			sumXL += float32(wl * x[i])
		}
		det := float32(sumW*sumL2) - float32(sumL*sumL)
		if det > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / det
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / det
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var cur float32
			for i := range n {
				diff := float32(float32(thisScale*float32(aux[i]))+thisMin) - x[i]
				cur += float32(w[i] * float32(diff*diff))
			}
			if cur < best {
				copy(L[:n], aux[:n])
				best, scale, lo = cur, thisScale, thisMin
			}
		}
	}
	return scale, -lo
}

// makeQX is ggml's make_qx_quants for rmse_type 1 and no importance weights: codes L
// in 0..2*nmax-1 (value l-nmax) and a signed scale, trying 18 scales around the
// range's and keeping the one with the least x^2-weighted error.
func makeQX(x []float32, nmax int32, L []int8) float32 {
	maxv, amax := absMax(x)
	if amax < groupMaxEps {
		for i := range x {
			L[i] = 0
		}
		return 0
	}
	fnmax := float32(nmax)
	sums := func(iscale float32, store bool) (sumLX, sumL2 float32) {
		for i, v := range x {
			l := min(max(nearestInt(float32(iscale*v)), -nmax), nmax-1)
			if store {
				L[i] = int8(l + nmax)
			}
			fl := float32(l)
			w := float32(v * v)
			sumLX += float32(float32(w*v) * fl)
			sumL2 += float32(float32(w*fl) * fl)
		}
		return sumLX, sumL2
	}
	sumLX, sumL2 := sums(-fnmax/maxv, true)
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := scale * sumLX
	const tenth float32 = 0.1
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale := -(fnmax + float32(tenth*float32(is))) / maxv
		sumLX, sumL2 = sums(iscale, false)
		if sumL2 > 0 && sumLX*sumLX > best*sumL2 {
			sums(iscale, true)
			scale = sumLX / sumL2
			best = scale * sumLX
		}
	}
	return scale
}

// packScalesK4 stores eight 6-bit scales and mins the way scaleMinK4 reads them.
func packScalesK4(s []byte, ls, lm [8]uint8) {
	for j := range 8 {
		if j < 4 {
			s[j] = ls[j]
			s[j+4] = lm[j]
		} else {
			s[j+4] = ls[j]&0xf | (lm[j]&0xf)<<4
			s[j-4] |= (ls[j] >> 4) << 6
			s[j] |= (lm[j] >> 4) << 6
		}
	}
}

// quantKMin is the shared part of Q4_K and Q5_K: per 32-value sub-block a scale and a
// min from makeQKX2, both coded in 6 bits against the block's largest, then every
// value re-coded against the coded scale and min. It fills the block's first 16 bytes
// (d, dmin, scales) and returns the codes in 0..nmax.
func quantKMin(x []float32, b []byte, nmax int32, rmin float32, nstep int) (L [qkK]uint8) {
	var scales, mins [8]float32
	var weights [32]float32
	var aux [32]uint8
	var maxScale, maxMin float32
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		av := sqrt32(sumX2 / 32)
		for l, v := range xs {
			weights[l] = av + abs32(v)
		}
		scales[j], mins[j] = makeQKX2(xs, weights[:], nmax, L[32*j:32*j+32], aux[:], rmin, 0.1, nstep)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	var ls, lm [8]uint8
	for j := range 8 {
		// C stores the int in a uint8_t before clamping: a wrap, which Go's conversion
		// reproduces.
		ls[j] = min(63, uint8(nearestInt(float32(invScale*scales[j]))))
		lm[j] = min(63, uint8(nearestInt(float32(invMin*mins[j]))))
	}
	s := b[4:16]
	clear(s)
	packScalesK4(s, ls, lm)
	put16(b, f32ToF16(maxScale/63))
	put16(b[2:], f32ToF16(maxMin/63))
	dAll, mAll := f16ToF32(le16(b)), f16ToF32(le16(b[2:]))
	for j := range 8 {
		sc, m := scaleMinK4(j, s)
		d := dAll * float32(sc)
		if d == 0 {
			continue // keeps makeQKX2's codes, as ggml does
		}
		dm := mAll * float32(m)
		for i, v := range x[32*j : 32*j+32] {
			L[32*j+i] = uint8(min(max(nearestInt((v+dm)/d), 0), nmax))
		}
	}
	return L
}

func quantQ4K(x []float32, b []byte) {
	L := quantKMin(x, b, 15, -1, 20)
	qs := b[16:144]
	for k := range 4 {
		for l := range 32 {
			qs[32*k+l] = L[64*k+l] | L[64*k+l+32]<<4
		}
	}
}

func quantQ5K(x []float32, b []byte) {
	L := quantKMin(x, b, 31, -0.5, 15)
	qh, qs := b[16:48], b[48:176]
	clear(qh)
	for k := range 4 {
		for l := range 32 {
			lo, hi := L[64*k+l], L[64*k+l+32]
			qh[l] |= lo>>4<<(2*k) | hi>>4<<(2*k+1)
			qs[32*k+l] = lo&0xf | (hi&0xf)<<4
		}
	}
}

func quantQ6K(x []float32, b []byte) {
	var L [qkK]int8
	var scales [16]float32
	var maxScale, maxAbs float32
	for ib := range 16 {
		s := makeQX(x[16*ib:16*ib+16], 32, L[16*ib:16*ib+16])
		scales[ib] = s
		if a := abs32(s); a > maxAbs {
			maxAbs, maxScale = a, s
		}
	}
	clear(b[:210])
	if maxAbs < groupMaxEps {
		return
	}
	iscale := -128 / maxScale
	put16(b[208:], f32ToF16(1/iscale))
	d := f16ToF32(le16(b[208:]))
	sc := b[192:208]
	for ib := range 16 {
		sc[ib] = uint8(int8(min(127, nearestInt(float32(iscale*scales[ib])))))
	}
	for j := range 16 {
		dj := d * float32(int8(sc[j]))
		if dj == 0 {
			continue
		}
		for i, v := range x[16*j : 16*j+16] {
			L[16*j+i] = int8(min(max(nearestInt(v/dj), -32), 31) + 32)
		}
	}
	ql, qh := b[0:128], b[128:192]
	for h := range 2 {
		for l := range 32 {
			q := func(t int) uint8 { return uint8(L[128*h+32*t+l]) }
			ql[64*h+l] = q(0)&0xf | (q(2)&0xf)<<4
			ql[64*h+l+32] = q(1)&0xf | (q(3)&0xf)<<4
			qh[32*h+l] = q(0)>>4 | (q(1)>>4)<<2 | (q(2)>>4)<<4 | (q(3)>>4)<<6
		}
	}
}

// quantQ8K codes 256 values against the one of largest magnitude mapped to -127, and
// sums each 16 codes (the K-quant dot products use the sums for their offsets).
// ggml codes an all-zero block as zeros; so does this for blocks below tinyBlock,
// where ggml's nearest_int would assert.
func quantQ8K(x []float32, b []byte) {
	maxv, amax := absMax(x)
	if amax < tinyBlock {
		clear(b[:292])
		return
	}
	iscale := -127 / maxv
	qs := b[4:260]
	for j, v := range x {
		qs[j] = uint8(int8(min(127, nearestInt(float32(iscale*v)))))
	}
	for j := range 16 {
		var s int16
		for _, q := range qs[16*j : 16*j+16] {
			s += int16(int8(q))
		}
		binary.LittleEndian.PutUint16(b[260+2*j:], uint16(s))
	}
	binary.LittleEndian.PutUint32(b, math.Float32bits(1/iscale))
}

package quant

import "math"

// f16ToF32 widens an IEEE binary16 value; every half is exactly a float32.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // infinity or NaN; the payload moves up with the mantissa
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: man * 2^-24, exact in float32.
	f := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// f32ToF16 rounds to the nearest half, ties to even, as ggml's GGML_FP32_TO_FP16 and
// F16C's VCVTPS2PH do. Overflow gives infinity; NaN gives the quiet NaN 0x7e00 with
// the input's sign, as ggml does.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // the half's biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	var m, shift uint32
	if e >= 1 {
		m, shift = man, 13
	} else {
		if e < -10 {
			return sign // below half the smallest subnormal: rounds to zero
		}
		m, shift = man|0x800000, uint32(14-e)
	}
	q := m >> shift
	rest := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rest > half || rest == half && q&1 == 1 {
		q++ // a carry out of the mantissa correctly bumps the exponent
	}
	if e >= 1 {
		return sign | uint16(uint32(e)<<10+q)
	}
	return sign | uint16(q)
}

// bf16ToF32 widens a bfloat16: its bits are a float32's top half.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds to nearest even and keeps NaNs quiet, as ggml's GGML_FP32_TO_BF16.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tandem-serve/tandem/gguf"
)

// Block geometry, as ggml-common.h lays the blocks out (all little-endian):
//
//	Q4_0  {d f16; qs [16]u8}                      value = (nibble-8)*d
//	Q4_1  {d, m f16; qs [16]u8}                   value = nibble*d + m
//	Q5_0  {d f16; qh u32; qs [16]u8}              value = (nibble|bit<<4 - 16)*d
//	Q5_1  {d, m f16; qh u32; qs [16]u8}           value = (nibble|bit<<4)*d + m
//	Q8_0  {d f16; qs [32]i8}                      value = q*d
//	Q4_K  {d, dmin f16; scales [12]u8; qs [128]u8}
//	Q5_K  {d, dmin f16; scales [12]u8; qh [32]u8; qs [128]u8}
//	Q6_K  {ql [128]u8; qh [64]u8; scales [16]i8; d f16}
//	Q8_K  {d f32; qs [256]i8; bsums [16]i16}
//
// In the 32-value formats byte j of qs holds value j in its low nibble and value j+16
// in its high one. The K-quants are 256-value super-blocks; see each function.
const (
	qk  = 32  // values in a 32-value block
	qkK = 256 // values in a K-quant super-block
)

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// Dequantize expands data, a whole number of t's blocks, into dst, which must hold
// exactly the values data encodes. The arithmetic is ggml's dequantize_row_*, so the
// values are bit for bit llama.cpp's.
func Dequantize(t gguf.Type, data []byte, dst []float32) error {
	n, err := valueCount(t, len(data))
	if err != nil {
		return err
	}
	if n != len(dst) {
		return fmt.Errorf("quant: %d bytes of %v hold %d values, not %d", len(data), t, n, len(dst))
	}
	switch t {
	case gguf.TypeF32:
		for i := range dst {
			dst[i] = math.Float32frombits(le32(data[4*i:]))
		}
		return nil
	case gguf.TypeF16:
		for i := range dst {
			dst[i] = f16ToF32(le16(data[2*i:]))
		}
		return nil
	case gguf.TypeBF16:
		for i := range dst {
			dst[i] = bf16ToF32(le16(data[2*i:]))
		}
		return nil
	}
	f := dequantizers[t]
	bb, be := t.BlockBytes(), t.BlockElems()
	for i := 0; i < n/be; i++ {
		f(data[i*bb:(i+1)*bb], dst[i*be:(i+1)*be])
	}
	return nil
}

// valueCount is how many values size bytes of t hold, or an error if t is not a
// type this package knows or size is not a whole number of blocks.
func valueCount(t gguf.Type, size int) (int, error) {
	switch t {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
	default:
		if dequantizers[t] == nil {
			return 0, fmt.Errorf("quant: unsupported tensor type %v", t)
		}
	}
	bb := t.BlockBytes()
	if size%bb != 0 {
		return 0, fmt.Errorf("quant: %d bytes is not a whole number of %v blocks (%d bytes each)", size, t, bb)
	}
	return size / bb * t.BlockElems(), nil
}

var dequantizers = map[gguf.Type]func(b []byte, y []float32){
	gguf.TypeQ4_0: dequantQ4_0,
	gguf.TypeQ4_1: dequantQ4_1,
	gguf.TypeQ5_0: dequantQ5_0,
	gguf.TypeQ5_1: dequantQ5_1,
	gguf.TypeQ8_0: dequantQ8_0,
	gguf.TypeQ4_K: dequantQ4K,
	gguf.TypeQ5_K: dequantQ5K,
	gguf.TypeQ6_K: dequantQ6K,
	gguf.TypeQ8_K: dequantQ8K,
}

// Products are converted to float32 before any addition, here and in the quantizers:
// Go may fuse x*y+z into one rounding on CPUs with FMA, and an explicit conversion is
// the language's way to forbid it, so results match ggml's unfused C.

func dequantQ4_0(b []byte, y []float32) {
	d := f16ToF32(le16(b))
	qs := b[2:18]
	for j, q := range qs {
		y[j] = float32(int(q&0xf)-8) * d
		y[j+16] = float32(int(q>>4)-8) * d
	}
}

func dequantQ4_1(b []byte, y []float32) {
	d, m := f16ToF32(le16(b)), f16ToF32(le16(b[2:]))
	qs := b[4:20]
	for j, q := range qs {
		y[j] = float32(float32(q&0xf)*d) + m
		y[j+16] = float32(float32(q>>4)*d) + m
	}
}

func dequantQ5_0(b []byte, y []float32) {
	d := f16ToF32(le16(b))
	qh := le32(b[2:])
	qs := b[6:22]
	for j, q := range qs {
		h0 := int(qh>>j&1) << 4
		h1 := int(qh>>(j+16)&1) << 4
		y[j] = float32(int(q&0xf)|h0-16) * d
		y[j+16] = float32(int(q>>4)|h1-16) * d
	}
}

func dequantQ5_1(b []byte, y []float32) {
	d, m := f16ToF32(le16(b)), f16ToF32(le16(b[2:]))
	qh := le32(b[4:])
	qs := b[8:24]
	for j, q := range qs {
		h0 := int(qh>>j&1) << 4
		h1 := int(qh>>(j+16)&1) << 4
		y[j] = float32(float32(int(q&0xf)|h0)*d) + m
		y[j+16] = float32(float32(int(q>>4)|h1)*d) + m
	}
}

func dequantQ8_0(b []byte, y []float32) {
	d := f16ToF32(le16(b))
	for j, q := range b[2:34] {
		y[j] = float32(int8(q)) * d
	}
}

// scaleMinK4 unpacks the j-th (0..7) 6-bit scale and min of a Q4_K or Q5_K block: the
// first four pairs are the low 6 bits of bytes 0..7; the last four take their low 4
// bits from bytes 8..11 and their top 2 from the spare bits of bytes 0..7.
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// dequantQ4K: eight 32-value sub-blocks, value = d*scale*q - dmin*min with q in
// 0..15. Sub-blocks 2k and 2k+1 share qs[32k:32k+32], low and high nibbles.
func dequantQ4K(b []byte, y []float32) {
	d, dmin := f16ToF32(le16(b)), f16ToF32(le16(b[2:]))
	scales, qs := b[4:16], b[16:144]
	for k := range 4 {
		sc, m := scaleMinK4(2*k, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(2*k+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		q := qs[32*k : 32*k+32]
		o := y[64*k : 64*k+64]
		for l := range 32 {
			o[l] = float32(d1*float32(q[l]&0xf)) - m1
			o[l+32] = float32(d2*float32(q[l]>>4)) - m2
		}
	}
}

// dequantQ5K is Q4_K with a fifth bit: value l of sub-block 2k has bit 2k of qh[l],
// value l of sub-block 2k+1 bit 2k+1.
func dequantQ5K(b []byte, y []float32) {
	d, dmin := f16ToF32(le16(b)), f16ToF32(le16(b[2:]))
	scales, qh, qs := b[4:16], b[16:48], b[48:176]
	for k := range 4 {
		sc, m := scaleMinK4(2*k, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(2*k+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		q := qs[32*k : 32*k+32]
		o := y[64*k : 64*k+64]
		for l := range 32 {
			lo := q[l]&0xf | (qh[l]>>(2*k)&1)<<4
			hi := q[l]>>4 | (qh[l]>>(2*k+1)&1)<<4
			o[l] = float32(d1*float32(lo)) - m1
			o[l+32] = float32(d2*float32(hi)) - m2
		}
	}
}

// q6Value is value 128*h + 32*t + l (h in 0..1, t in 0..3, l in 0..31) of a Q6_K block
// as its unsigned 6-bit code: the low 4 bits are a nibble of ql, the high 2 bits a pair
// of bits of qh.
func q6Value(ql, qh []byte, h, t, l int) uint8 {
	lo := ql[64*h+l+32*(t&1)]
	if t >= 2 {
		lo >>= 4
	}
	return lo&0xf | (qh[32*h+l]>>(2*t)&3)<<4
}

// dequantQ6K: sixteen 16-value sub-blocks with signed 8-bit scales, value =
// d*scale*(q-32) with q in 0..63.
func dequantQ6K(b []byte, y []float32) {
	ql, qh, sc := b[0:128], b[128:192], b[192:208]
	d := f16ToF32(le16(b[208:]))
	for h := range 2 {
		for t := range 4 {
			for l := range 32 {
				e := 128*h + 32*t + l
				s := float32(int8(sc[e/16]))
				y[e] = float32(d*s) * float32(int(q6Value(ql, qh, h, t, l))-32)
			}
		}
	}
}

func dequantQ8K(b []byte, y []float32) {
	d := math.Float32frombits(le32(b))
	for j, q := range b[4:260] {
		y[j] = d * float32(int8(q))
	}
}

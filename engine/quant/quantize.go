package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tandem-serve/tandem/gguf"
)

// Quantize encodes src as t's blocks, giving the bytes llama.cpp's reference
// quantizers (quantize_row_*_ref, no importance matrix) give, so tests and benchmarks
// can write GGUF files of every type. len(src) must be a whole number of blocks, and
// every value finite.
func Quantize(t gguf.Type, src []float32) ([]byte, error) {
	be := t.BlockElems()
	if be == 0 {
		return nil, fmt.Errorf("quant: unknown tensor type %v", t)
	}
	if len(src)%be != 0 {
		return nil, fmt.Errorf("quant: %d values is not a whole number of %v blocks (%d values each)", len(src), t, be)
	}
	for i, v := range src {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("quant: value %d is %v; only finite values can be quantized", i, v)
		}
	}
	out := make([]byte, len(src)/be*t.BlockBytes())
	switch t {
	case gguf.TypeF32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
		return out, nil
	case gguf.TypeF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(out[2*i:], f32ToF16(v))
		}
		return out, nil
	case gguf.TypeBF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(out[2*i:], f32ToBF16(v))
		}
		return out, nil
	}
	f := quantizers[t]
	if f == nil {
		return nil, fmt.Errorf("quant: no quantizer for tensor type %v", t)
	}
	bb := t.BlockBytes()
	for i := 0; i < len(src)/be; i++ {
		f(src[i*be:(i+1)*be], out[i*bb:(i+1)*bb])
	}
	return out, nil
}

var quantizers = map[gguf.Type]func(x []float32, b []byte){
	gguf.TypeQ4_0: quantQ4_0,
	gguf.TypeQ4_1: quantQ4_1,
	gguf.TypeQ5_0: quantQ5_0,
	gguf.TypeQ5_1: quantQ5_1,
	gguf.TypeQ8_0: quantQ8_0,
	gguf.TypeQ4_K: quantQ4K,
	gguf.TypeQ5_K: quantQ5K,
	gguf.TypeQ6_K: quantQ6K,
	gguf.TypeQ8_K: quantQ8K,
}

func put16(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }

// absMax is the value of largest magnitude (the first such, keeping its sign) and
// that magnitude.
func absMax(x []float32) (maxv, amax float32) {
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, maxv = a, v
		}
	}
	return maxv, amax
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// minMax are x's smallest and largest values.
func minMax(x []float32) (lo, hi float32) {
	lo, hi = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		// Not the builtins: they order -0 below +0, ggml's comparisons do not.
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}

// inverse is 1/d, or 0 for d == 0, as ggml's `d ? 1.0f/d : 0.0f`.
func inverse(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// truncClamp converts as C's (int8_t)(v) then MIN(hi, .): toward zero. v is never
// below -1 here, so the int8 wrap of out-of-range values in C cannot occur.
func truncClamp(v float32, hi int) uint8 { return uint8(min(hi, int(int8(v)))) }

// Q4_0: the signed extreme maps to -8, so d = max/-8.
func quantQ4_0(x []float32, b []byte) {
	maxv, _ := absMax(x)
	d := maxv / -8
	id := inverse(d)
	put16(b, f32ToF16(d))
	for j := range 16 {
		lo := truncClamp(float32(x[j]*id)+8.5, 15)
		hi := truncClamp(float32(x[j+16]*id)+8.5, 15)
		b[2+j] = lo | hi<<4
	}
}

func quantQ4_1(x []float32, b []byte) {
	lo, hi := minMax(x)
	d := (hi - lo) / 15
	id := inverse(d)
	put16(b, f32ToF16(d))
	put16(b[2:], f32ToF16(lo))
	for j := range 16 {
		a := truncClamp(float32((x[j]-lo)*id)+0.5, 15)
		c := truncClamp(float32((x[j+16]-lo)*id)+0.5, 15)
		b[4+j] = a | c<<4
	}
}

func quantQ5_0(x []float32, b []byte) {
	maxv, _ := absMax(x)
	d := maxv / -16
	id := inverse(d)
	put16(b, f32ToF16(d))
	var qh uint32
	for j := range 16 {
		lo := truncClamp(float32(x[j]*id)+16.5, 31)
		hi := truncClamp(float32(x[j+16]*id)+16.5, 31)
		b[6+j] = lo&0xf | (hi&0xf)<<4
		qh |= uint32(lo>>4) << j
		qh |= uint32(hi>>4) << (j + 16)
	}
	binary.LittleEndian.PutUint32(b[2:], qh)
}

func quantQ5_1(x []float32, b []byte) {
	lo, hi := minMax(x)
	d := (hi - lo) / 31
	id := inverse(d)
	put16(b, f32ToF16(d))
	put16(b[2:], f32ToF16(lo))
	var qh uint32
	for j := range 16 {
		// ggml converts with (uint8_t) and no clamp; the value is in [0, 31.5).
		a := uint8(float32((x[j]-lo)*id) + 0.5)
		c := uint8(float32((x[j+16]-lo)*id) + 0.5)
		b[8+j] = a&0xf | (c&0xf)<<4
		qh |= uint32(a>>4&1) << j
		qh |= uint32(c>>4&1) << (j + 16)
	}
	binary.LittleEndian.PutUint32(b[4:], qh)
}

func quantQ8_0(x []float32, b []byte) {
	_, amax := absMax(x)
	d := amax / 127
	id := inverse(d)
	put16(b, f32ToF16(d))
	for j, v := range x {
		b[2+j] = uint8(int8(math.Round(float64(v * id)))) // roundf: half away from zero
	}
}

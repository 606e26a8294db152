package quant

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
)

func TestHalfRoundTripsEveryValue(t *testing.T) {
	for h := range 1 << 16 {
		f := f16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if got := f32ToF16(f); got != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, got)
		}
	}
	if got := f32ToF16(float32(math.NaN())); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Fatalf("NaN -> %#04x, not a NaN", got)
	}
}

// Every float32 rounds to the nearer of its two neighbouring halves, ties to the even one.
func TestHalfRoundsToNearestEven(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	check := func(f float32) {
		h := f32ToF16(f)
		got := float64(f16ToF32(h))
		a := math.Abs(float64(f))
		if a >= 65520 { // 65504 + half an ulp: overflows
			if !math.IsInf(got, 0) {
				t.Fatalf("%v -> %v, want infinity", f, got)
			}
			return
		}
		// The neighbours of |f| among halves, by brute force over the ulp grid.
		e := math.Max(math.Floor(math.Log2(a)), -14)
		ulp := math.Pow(2, e-10)
		lo := math.Floor(a/ulp) * ulp
		hi := lo + ulp
		want := lo
		if a-lo > hi-a || a-lo == hi-a && int64(lo/ulp)%2 == 1 {
			want = hi
		}
		if f < 0 {
			want = -want
		}
		if got != want {
			t.Fatalf("%v (%#x) -> %v, want %v", f, math.Float32bits(f), got, want)
		}
	}
	for range 200000 {
		check(math.Float32frombits(r.Uint32() & 0xc7ffffff)) // exponents up to about 2^16
		check(float32(r.NormFloat64()) * 1e-5)
	}
	// Exact ties between halves.
	for h := range 0x7bff {
		a, b := float64(f16ToF32(uint16(h))), float64(f16ToF32(uint16(h+1)))
		check(float32((a + b) / 2))
	}
}

// quantTypes are the types Quantize codes, with the largest root-mean-square error
// relative to the data's RMS that a gaussian row may show after a round trip, and the
// largest error on any value relative to its block's largest magnitude: the format's
// bound where it has a simple one (commented), else about 1.4 times what it gives.
var quantTypes = []struct {
	t           gguf.Type
	rms, maxErr float64
}{
	{gguf.TypeF32, 0, 0},
	{gguf.TypeF16, 3e-4, 5e-4},     // half an ulp: 2^-11
	{gguf.TypeBF16, 3e-3, 4e-3},    // 2^-8
	{gguf.TypeQ8_0, 0.008, 0.0045}, // half a step (1/254) plus the f16 scale's rounding
	{gguf.TypeQ8_K, 0.01, 0.0045},
	{gguf.TypeQ6_K, 0.025, 0.025},
	{gguf.TypeQ5_0, 0.06, 0.065}, // +16 clamps to 15: a whole step, 1/16
	{gguf.TypeQ5_1, 0.055, 0.035},
	{gguf.TypeQ5_K, 0.05, 0.06},
	{gguf.TypeQ4_0, 0.12, 0.13}, // +8 clamps to 7: 1/8
	{gguf.TypeQ4_1, 0.11, 0.07},
	{gguf.TypeQ4_K, 0.1, 0.1},
}

func TestRoundTripError(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, 8192)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * 0.03
	}
	for _, q := range quantTypes {
		b, err := Quantize(q.t, x)
		if err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(x))
		if err := Dequantize(q.t, b, y); err != nil {
			t.Fatal(err)
		}
		be := max(q.t.BlockElems(), 32)
		var se, sx, worst float64
		for i := 0; i < len(x); i += be {
			_, amax := absMax(x[i : i+be])
			for k := i; k < i+be; k++ {
				e := float64(y[k] - x[k])
				se += e * e
				sx += float64(x[k]) * float64(x[k])
				worst = max(worst, math.Abs(e)/float64(amax))
			}
		}
		rel := math.Sqrt(se / sx)
		t.Logf("%v: relative RMS error %.4f, worst %.4f of the block's largest", q.t, rel, worst)
		if rel > q.rms || worst > q.maxErr {
			t.Errorf("%v: relative RMS error %.4f (limit %v), worst %.4f (limit %v)", q.t, rel, q.rms, worst, q.maxErr)
		}
	}
}

func TestQuantizeRejectsBadInput(t *testing.T) {
	for _, c := range []struct {
		t    gguf.Type
		x    []float32
		want string
	}{
		{gguf.TypeQ8_0, make([]float32, 33), "not a whole number"},
		{gguf.TypeQ4_K, make([]float32, 32), "not a whole number"},
		{gguf.TypeQ8_0, append(make([]float32, 31), float32(math.NaN())), "value 31 is NaN"},
		{gguf.TypeQ6_K, append(make([]float32, 255), float32(math.Inf(1))), "value 255 is +Inf"},
		{gguf.TypeIQ2_XXS, make([]float32, 256), "no quantizer"},
		{gguf.Type(99), make([]float32, 256), "unknown tensor type"},
	} {
		_, err := Quantize(c.t, c.x)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Quantize(%v, %d values) = %v, want an error saying %q", c.t, len(c.x), err, c.want)
		}
	}
}

func TestDequantizeRejectsBadInput(t *testing.T) {
	for _, c := range []struct {
		t     gguf.Type
		bytes int
		dst   int
		want  string
	}{
		{gguf.TypeQ8_0, 35, 32, "not a whole number of Q8_0 blocks"},
		{gguf.TypeQ8_0, 34, 64, "hold 32 values, not 64"},
		{gguf.TypeIQ4_NL, 18, 32, "unsupported tensor type IQ4_NL"},
	} {
		err := Dequantize(c.t, make([]byte, c.bytes), make([]float32, c.dst))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Dequantize(%v, %d bytes, %d values) = %v, want an error saying %q", c.t, c.bytes, c.dst, err, c.want)
		}
	}
}

package quant

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
)

var matrixTypes = []gguf.Type{
	gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ4_1, gguf.TypeQ5_1,
	gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K,
}

func gaussian(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

// testMatrix is a quantized n x k matrix of gaussian weights, with its dequantized
// values.
func testMatrix(t testing.TB, typ gguf.Type, k, n int, r *rand.Rand) (*Matrix, []float32) {
	t.Helper()
	data, err := Quantize(typ, gaussian(r, k*n, 0.05))
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewMatrix(typ, k, n, data)
	if err != nil {
		t.Fatal(err)
	}
	deq := make([]float32, k*n)
	if err := Dequantize(typ, data, deq); err != nil {
		t.Fatal(err)
	}
	return w, deq
}

// MulAdd against dequantize-then-multiply in float64. The only approximation is the
// activations' 8-bit coding, which moves each x by at most half a step (its block's
// largest magnitude / 254), so each output may differ by at most the sum of |w| times
// that, plus float32 rounding. A kernel that mixes up rows, blocks or scales is off by
// far more.
func TestMulAddMatchesDequantizedProduct(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, typ := range matrixTypes {
		for _, shape := range []struct{ m, k, n int }{{1, 256, 1}, {3, 512, 5}, {7, 768, 9}} {
			k, n, m := shape.k, shape.n, shape.m
			if typ.BlockElems() == qk {
				k = k/256*32 + 64 // 32-value formats: also odd block counts (K=96, 128, ...)
				k = max(k, 96)
			}
			t.Run(fmt.Sprintf("%v/m%d_k%d_n%d", typ, m, k, n), func(t *testing.T) {
				w, deq := testMatrix(t, typ, k, n, r)
				ldx, ldo := k+3, n+2
				x := gaussian(r, m*ldx, 1)
				out := gaussian(r, m*ldo, 1)
				before := append([]float32(nil), out...)
				w.MulAdd(m, x, ldx, out, ldo)
				block := qk
				if typ.BlockElems() == qkK {
					block = qkK
				}
				for i := range m {
					for j := range ldo {
						got := out[i*ldo+j]
						if j >= n {
							if got != before[i*ldo+j] {
								t.Fatalf("wrote out[%d][%d], beyond N=%d", i, j, n)
							}
							continue
						}
						var want, bound, mag float64
						for b := 0; b < k; b += block {
							_, amax := absMax(x[i*ldx+b : i*ldx+b+block])
							for p := b; p < b+block; p++ {
								wv, xv := float64(deq[j*k+p]), float64(x[i*ldx+p])
								want += wv * xv
								bound += math.Abs(wv) * float64(amax) / 254
								mag += math.Abs(wv * xv)
							}
						}
						want += float64(before[i*ldo+j])
						if d := math.Abs(float64(got) - want); d > bound+1e-5*(mag+math.Abs(want)) {
							t.Fatalf("out[%d][%d] = %v, want %v within %.3g (off by %.3g)", i, j, got, want, bound, d)
						}
					}
				}
			})
		}
	}
}

// A row's outputs must be the same bits alone and inside any batch, whatever the
// thread count and whichever implementation runs: batched and single-sequence prefill
// then give identical KV.
func TestMulAddRowsIndependentOfBatchAndThreads(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, typ := range matrixTypes {
		const k, n, rows = 512, 70, 512 // n: more than one chunk of batched decode (batchCols), and a partial tile
		w, _ := testMatrix(t, typ, k, n, r)
		x := gaussian(r, rows*k, 1)
		var alone []float32
		for _, ks := range supportedKernels() {
			t.Run(fmt.Sprintf("%v/%s", typ, ks.name), func(t *testing.T) {
				withKernels(t, ks, func() {
					if alone == nil {
						alone = make([]float32, rows*n)
						for i := range rows {
							w.MulAdd(1, x[i*k:], k, alone[i*n:], n)
						}
					}
					for _, m := range []int{1, 3, 7, 8, 13, 64, 512} {
						for _, procs := range []int{1, 2, 5} {
							if ks == portable && m > 13 {
								continue // slow under -race; its rows are computed one by one anyway
							}
							prev := runtime.GOMAXPROCS(procs)
							got := make([]float32, m*n)
							w.MulAdd(m, x, k, got, n)
							runtime.GOMAXPROCS(prev)
							for i := range m * n {
								if math.Float32bits(got[i]) != math.Float32bits(alone[i]) {
									t.Fatalf("m=%d GOMAXPROCS=%d: out[%d][%d] = %v, alone %v", m, procs, i/n, i%n, got[i], alone[i])
								}
							}
						}
					}
				})
			})
		}
	}
}

func TestMulAddEdgeShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	w, deq := testMatrix(t, gguf.TypeQ8_0, 32, 1, r)
	// m = 0 touches nothing, even with empty slices.
	w.MulAdd(0, nil, 32, nil, 1)
	// One block, one column.
	x := gaussian(r, 32, 1)
	out := []float32{1}
	w.MulAdd(1, x, 32, out, 1)
	var want float64 = 1
	for p := range 32 {
		want += float64(deq[p]) * float64(x[p])
	}
	if math.Abs(float64(out[0])-want) > 0.02*math.Abs(want)+1e-3 {
		t.Fatalf("1x32 . 32x1 = %v, want %v", out[0], want)
	}
}

func TestMulAddPanicsOnShortBuffers(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	w, _ := testMatrix(t, gguf.TypeQ4_0, 64, 8, r)
	for _, c := range []struct {
		name        string
		m, ldx, ldo int
		nx, nout    int
	}{
		{"short x", 2, 64, 8, 64 + 63, 16},
		{"short out", 2, 64, 8, 128, 15},
		{"ldx below K", 1, 32, 8, 64, 8},
		{"ldo below N", 1, 64, 4, 64, 8},
		{"negative m", -1, 64, 8, 64, 8},
	} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "quant: MulAdd") {
					t.Errorf("%s: panic %v, want a MulAdd message", c.name, p)
				}
			}()
			w.MulAdd(c.m, make([]float32, c.nx), c.ldx, make([]float32, c.nout), c.ldo)
		}()
	}
}

func TestNewMatrixChecks(t *testing.T) {
	for _, c := range []struct {
		t    gguf.Type
		k, n int
		size int
		want string
	}{
		{gguf.TypeF32, 32, 1, 128, "no matrix product for tensor type F32"},
		{gguf.TypeQ4_K, 32, 1, 144, "not a whole number of Q4_K blocks"},
		{gguf.TypeQ8_0, 64, 2, 135, "is 136 bytes, not 135"},
		{gguf.TypeQ8_0, 0, 2, 0, "has no values"},
	} {
		_, err := NewMatrix(c.t, c.k, c.n, make([]byte, c.size))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewMatrix(%v, %d, %d, %d bytes) = %v, want an error saying %q", c.t, c.k, c.n, c.size, err, c.want)
		}
	}
}

func TestRowDequantizesOneRow(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 20))
	for _, typ := range matrixTypes {
		w, deq := testMatrix(t, typ, 512, 3, r)
		got := make([]float32, 512)
		w.Row(2, got)
		for p := range got {
			if got[p] != deq[2*512+p] {
				t.Fatalf("%v: Row(2)[%d] = %v, want %v", typ, p, got[p], deq[2*512+p])
			}
		}
	}
}

// fma32 must round a*b+c once, exactly: checked against big.Float, on random operands
// and on ones built to land near halfway between two float32s.
func TestFMA32RoundsOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	check := func(a, b, c float32) {
		x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
		x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
		x.Add(x, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
		want, _ := x.Float32()
		if got := fma32(a, b, c); math.Float32bits(got) != math.Float32bits(want) && !(got == 0 && want == 0) {
			t.Fatalf("fma32(%v, %v, %v) = %v, want %v", a, b, c, got, want)
		}
	}
	for range 60000 {
		a := float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(40)-20))
		b := float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(40)-20))
		c := float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(80)-40))
		check(a, b, c)
		// c close to -a*b: cancellation; and a product whose low half is a halfway
		// pattern: a = 1+2^-12, b = 1+2^-12 give 1+2^-11+2^-24.
		check(a, b, -float32(float64(a)*float64(b)))
		u := float32(1 + math.Ldexp(float64(r.IntN(1<<11)+1), -12))
		check(u, u, c*1e-9)
		check(u, -u, float32(math.Ldexp(1, r.IntN(60)-30)))
	}
}

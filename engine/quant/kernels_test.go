package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
)

// withKernels runs f with ks as the active implementation.
func withKernels(t testing.TB, ks *kernelSet, f func()) {
	t.Helper()
	prev := active
	active = ks
	defer func() { active = prev }()
	f()
}

// randomWeights is n rows of k values of random bytes whose f16 scales (and mins)
// are replaced by finite ones, so every code pattern is exercised without NaNs.
func randomWeights(r *rand.Rand, typ gguf.Type, k, n int) []byte {
	rb, _ := typ.RowBytes(k)
	data := make([]byte, n*rb)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	half := func(off int) {
		h := f32ToF16(float32(r.NormFloat64() * 0.01))
		data[off], data[off+1] = byte(h), byte(h>>8)
	}
	bb := typ.BlockBytes()
	for b := 0; b < len(data); b += bb {
		switch typ {
		case gguf.TypeQ4_1, gguf.TypeQ5_1, gguf.TypeQ4_K, gguf.TypeQ5_K:
			half(b)
			half(b + 2)
		case gguf.TypeQ6_K:
			half(b + 208)
		default:
			half(b)
		}
	}
	return data
}

// Each assembly implementation gives the portable kernels' bits, on weights of random
// bytes (every code, scale and min pattern) and realistic activations, for tile
// shapes with and without partial row and column groups.
func TestKernelsMatchPortable(t *testing.T) {
	sets := supportedKernels()
	if len(sets) == 1 {
		t.Skip("only the portable kernels run on this CPU")
	}
	r := rand.New(rand.NewPCG(31, 32))
	for _, typ := range matrixTypes {
		for _, shape := range []struct{ m, kBlocks, n int }{
			{1, 1, 1}, {1, 3, 4}, {1, 2, 7}, {1, 5, 9}, {2, 17, 5}, {3, 18, 8}, {5, 33, 7}, {9, 6, 13}, {4, 1, 3}, {1, 48, 66}, {4, 35, 9}, {10, 5, 9}, {11, 7, 6},
		} {
			k := shape.kBlocks * typ.BlockElems()
			if typ.BlockElems() == qkK && shape.kBlocks > 6 {
				k = 6 * qkK
			}
			m, n := shape.m, shape.n
			w, err := NewMatrix(typ, k, n, randomWeights(r, typ, k, n))
			if err != nil {
				t.Fatal(err)
			}
			ldx, ldo := k+1, n+3
			x := gaussian(r, m*ldx, 1)
			if m > 1 {
				for p := range k { // one row of large values, one of zeros
					x[p] *= 1000
					x[ldx+p] = 0
				}
			}
			base := gaussian(r, m*ldo, 1)
			want := append([]float32(nil), base...)
			withKernels(t, portable, func() { w.MulAdd(m, x, ldx, want, ldo) })
			for _, ks := range sets[:len(sets)-1] {
				t.Run(fmt.Sprintf("%s/%v/m%d_k%d_n%d", ks.name, typ, m, k, n), func(t *testing.T) {
					got := append([]float32(nil), base...)
					withKernels(t, ks, func() { w.MulAdd(m, x, ldx, got, ldo) })
					for i := range got {
						if !sameBits(got[i], want[i]) {
							t.Fatalf("out[%d][%d] = %v (%#x), portable %v (%#x)", i/ldo, i%ldo,
								got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
				})
			}
		}
	}
}

// The assembly activation quantizers give the Go ones' bytes, on rows of every shape
// the kernels meet: gaussian, huge and tiny magnitudes, zeros, exact ties, one value
// per block, and rows with a NaN or an infinity.
func TestActQuantizersMatchGo(t *testing.T) {
	sets := supportedKernels()
	r := rand.New(rand.NewPCG(33, 34))
	rows := [][]float32{}
	add := func(f func(i int) float32) {
		row := make([]float32, 4*qkK)
		for i := range row {
			row[i] = f(i)
		}
		rows = append(rows, row)
	}
	add(func(i int) float32 { return float32(r.NormFloat64()) })
	add(func(i int) float32 { return float32(r.NormFloat64()) * 1e30 })
	add(func(i int) float32 { return float32(r.NormFloat64()) * 1e-30 })
	add(func(i int) float32 { return 0 })
	add(func(i int) float32 { return float32(i%64-32) / 4 }) // ties at x/d = k+0.5
	add(func(i int) float32 {
		if i%37 == 0 {
			return -float32(i)
		}
		return 0
	})
	add(func(i int) float32 { return float32(i%7) - 3 })                             // equal magnitudes of both signs
	add(func(i int) float32 { return math.Float32frombits(0x80303030 + uint32(i)) }) // subnormals
	add(func(i int) float32 { return float32(r.NormFloat64()) * 1.1e-30 })           // around tinyBlock
	nan := make([]float32, 4*qkK)
	nan[300] = float32(math.NaN())
	rows = append(rows, nan)
	inf := make([]float32, 4*qkK)
	inf[5] = float32(math.Inf(-1))
	rows = append(rows, inf)
	for _, ks := range sets[:len(sets)-1] {
		for ri, row := range rows {
			for _, mode := range []int{-1, 3, 4, 7} {
				var want, got acts
				want.quantize32(1, row, len(row), len(row), mode, quantRow32Go)
				got.quantize32(1, row, len(row), len(row), mode, ks.row32)
				for b := range want.nb {
					if !sameBits(got.d[b], want.d[b]) {
						t.Fatalf("%s row %d mode %d: block %d scale %v, Go %v", ks.name, ri, mode, b, got.d[b], want.d[b])
					}
				}
				if string(got.x) != string(want.x) {
					t.Fatalf("%s row %d mode %d: 32-value blocks differ from Go's", ks.name, ri, mode)
				}
			}
			var want, got acts
			want.quantizeK(1, row, len(row), len(row), quantRowKGo)
			got.quantizeK(1, row, len(row), len(row), ks.rowK)
			for i := range want.q8k {
				if got.q8k[i] != want.q8k[i] {
					t.Fatalf("%s row %d: Q8_K byte %d = %#x, Go %#x", ks.name, ri, i, got.q8k[i], want.q8k[i])
				}
			}
		}
	}
}

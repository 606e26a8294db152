package native

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

// closeEnough allows for the assembly's fused multiply-adds rounding once where the
// portable code rounds twice.
func closeEnough(a, b float32, k int) bool {
	return math.Abs(float64(a-b)) <= 1e-6*float64(k)+1e-5*math.Abs(float64(b))
}

func TestKernelAsmMatchesPortable(t *testing.T) {
	if !haveAsm {
		t.Skip("no AVX2/FMA on this CPU")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for mr := 1; mr <= 12; mr++ {
		for _, k := range []int{1, 3, 4, 7, 32, 129} {
			lda, ldc := k+5, 16+3
			a := randSlice(r, mr*lda)
			b := randSlice(r, k*panelWidth)
			c0 := randSlice(r, mr*ldc)
			c1 := append([]float32(nil), c0...)
			kernelGo(mr, k, a, lda, b, c0, ldc)
			kernelAsm(mr, k, a, lda, b, c1, ldc)
			for i := range mr {
				for j := range ldc {
					x, y := c1[i*ldc+j], c0[i*ldc+j]
					if j >= panelWidth && x != y {
						t.Fatalf("mr=%d k=%d: wrote outside the tile at (%d,%d)", mr, k, i, j)
					}
					if !closeEnough(x, y, k) {
						t.Fatalf("mr=%d k=%d: c[%d][%d] asm %v, portable %v", mr, k, i, j, x, y)
					}
				}
			}
		}
	}
}

// The 512-bit twelve-row kernel gives each row the bits the 256-bit kernels give it.
func TestKern12zMatchesKern6(t *testing.T) {
	if !haveAsmZ {
		t.Skip("no AVX-512 on this CPU")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, k := range []int{1, 3, 4, 5, 64, 129, 576} {
		lda, ldc := k+3, 16+5
		a := randSlice(r, 12*lda)
		b := randSlice(r, k*panelWidth)
		c0 := randSlice(r, 12*ldc)
		c1 := append([]float32(nil), c0...)
		kern12z(k, &a[0], lda, &b[0], &c1[0], ldc)
		kern6(k, &a[0], lda, &b[0], &c0[0], ldc)
		kern6(k, &a[6*lda], lda, &b[0], &c0[6*ldc], ldc)
		for i := range c0 {
			if math.Float32bits(c0[i]) != math.Float32bits(c1[i]) {
				t.Fatalf("k=%d: c[%d][%d] kern12z %v, kern6 %v", k, i/ldc, i%ldc, c1[i], c0[i])
			}
		}
	}
}

// A row's result must not depend on the rows sharing its tile: this is what makes
// batched decode and chunked prefill bit-identical to single-sequence runs.
func TestGemmRowsIndependentOfBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const k, n = 97, 100 // 7 panels: one-row products take four at once, then the rest one by one
	w := newPacked(k, n)
	copy(w.data, randSlice(r, len(w.data)))
	ldc := w.panels * panelWidth
	const rows = 29 // two twelve-row tiles and a tail of five with AVX-512
	a := randSlice(r, rows*k)
	full := make([]float32, rows*ldc)
	gemm(rows, a, k, w, full, ldc)
	for row := range rows {
		one := make([]float32, ldc)
		gemm(1, a[row*k:], k, w, one, ldc)
		for j := range n {
			if one[j] != full[row*ldc+j] {
				t.Fatalf("row %d col %d: alone %v, in batch %v", row, j, one[j], full[row*ldc+j])
			}
		}
	}
	// And against a plain triple loop.
	for row := range rows {
		for j := range n {
			var want float64
			for p := range k {
				want += float64(a[row*k+p]) * float64(w.at(p, j))
			}
			if got := full[row*ldc+j]; math.Abs(float64(got)-want) > 1e-4 {
				t.Fatalf("(%d,%d) = %v, want %v", row, j, got, want)
			}
		}
	}
}

func TestExpf(t *testing.T) {
	for x := float32(-90); x < 89; x += 0.37 {
		got, want := float64(expf(x)), math.Exp(float64(x))
		if want > 1e-37 && math.Abs(got-want)/want > 3e-7 {
			t.Fatalf("expf(%v) = %v, want %v", x, got, want)
		}
	}
}

package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
)

// mulAddAlone is one product the plain way, as MulAdd was before it became
// MulAddShared of one: x quantized for this matrix alone, every column in one
// kernel call on this goroutine.
func mulAddAlone(w *Matrix, m int, x []float32, ldx int, out []float32, ldo int) {
	k := kernels()
	var a acts
	if formats[w.t].block == qkK {
		a.quantizeK(m, x, ldx, w.k, k.rowK)
	} else {
		a.quantize32(m, x, ldx, w.k, laneMode(w.t), k.row32)
	}
	k.mul(w, &a, 0, w.n, out, ldo)
}

// MulAddShared (and so MulAdd) gives each product the bits it gets alone and unsplit,
// with matrices of different formats (two activation formats shared, one alone) and
// any thread count.
func TestMulAddSharedMatchesMulAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	const k = 512
	types := []gguf.Type{gguf.TypeQ5_0, gguf.TypeQ8_0, gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ6_K}
	ns := []int{40, 13, 70, 9, 33}
	var ws []*Matrix
	for i, typ := range types {
		w, _ := testMatrix(t, typ, k, ns[i], r)
		ws = append(ws, w)
	}
	for _, ks := range supportedKernels() {
		for _, m := range []int{1, 3, 8, 20} {
			for _, procs := range []int{1, 2, 3} {
				t.Run(fmt.Sprintf("%s/m%d/procs%d", ks.name, m, procs), func(t *testing.T) {
					withKernels(t, ks, func() {
						ldx := k + 5
						x := gaussian(r, m*ldx, 1)
						var ps []Product
						var want [][]float32
						for i, w := range ws {
							ldo := ns[i] + 3
							out := gaussian(r, m*ldo, 1)
							alone := append([]float32(nil), out...)
							mulAddAlone(w, m, x, ldx, alone, ldo)
							ps = append(ps, Product{W: w, Out: out, Ldo: ldo})
							want = append(want, alone)
						}
						single := make([][]float32, len(ps))
						for i, p := range ps {
							single[i] = append([]float32(nil), p.Out...)
						}
						prev := runtime.GOMAXPROCS(procs)
						MulAddShared(m, x, ldx, ps)
						for i, p := range ps {
							p.W.MulAdd(m, x, ldx, single[i], p.Ldo)
						}
						runtime.GOMAXPROCS(prev)
						for i, p := range ps {
							for j := range p.Out {
								if math.Float32bits(p.Out[j]) != math.Float32bits(want[i][j]) {
									t.Fatalf("product %d (%v) out[%d] = %v, alone %v", i, types[i], j, p.Out[j], want[i][j])
								}
								if math.Float32bits(single[i][j]) != math.Float32bits(want[i][j]) {
									t.Fatalf("MulAdd of product %d (%v) out[%d] = %v, alone %v", i, types[i], j, single[i][j], want[i][j])
								}
							}
						}
					})
				})
			}
		}
	}
}

// Once warm, a product allocates nothing of its own: no activation buffers, no
// closure, no bookkeeping (a decode step makes some 120). One core, so that
// internal/parallel's job, which is not this package's, is not counted; not under
// the race detector, whose sync.Pool drops items at random.
func TestMulAddSharedAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	r := rand.New(rand.NewPCG(23, 24))
	const k = 256
	var ps []Product
	for _, typ := range []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ8_0, gguf.TypeQ4_K} {
		w, _ := testMatrix(t, typ, k, 40, r)
		ps = append(ps, Product{W: w, Out: make([]float32, 2*40), Ldo: 40})
	}
	x := gaussian(r, 2*k, 1)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if n := testing.AllocsPerRun(50, func() { MulAddShared(2, x, k, ps) }); n != 0 {
		t.Errorf("MulAddShared: %v allocations a call", n)
	}
	if n := testing.AllocsPerRun(50, func() { ps[0].W.MulAdd(2, x, k, ps[0].Out, 40) }); n != 0 {
		t.Errorf("MulAdd: %v allocations a call", n)
	}
}

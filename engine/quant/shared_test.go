package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
)

// MulAddShared gives each product the bits MulAdd gives it alone, with matrices of
// different formats (two activation formats shared, one alone) and any thread count.
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
							w.MulAdd(m, x, ldx, alone, ldo)
							ps = append(ps, Product{W: w, Out: out, Ldo: ldo})
							want = append(want, alone)
						}
						prev := runtime.GOMAXPROCS(procs)
						MulAddShared(m, x, ldx, ps)
						runtime.GOMAXPROCS(prev)
						for i, p := range ps {
							for j := range p.Out {
								if math.Float32bits(p.Out[j]) != math.Float32bits(want[i][j]) {
									t.Fatalf("product %d (%v) out[%d] = %v, alone %v", i, types[i], j, p.Out[j], want[i][j])
								}
							}
						}
					})
				})
			}
		}
	}
}

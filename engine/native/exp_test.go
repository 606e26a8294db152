package native

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The vector exponential gives expf's bits on every value the engine feeds it: scores
// minus their maximum (all <= 0), negated SwiGLU gates, the range's edges, and values
// past 88 (where the assembly hands over to expf).
func TestExpSubMatchesExpf(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var src []float32
	for range 5000 {
		src = append(src, float32(r.NormFloat64()*30), float32(-r.ExpFloat64()*20))
	}
	for _, v := range []float32{0, float32(math.Copysign(0, -1)), -87.3, -87.29, -87.31, -87.4, 88, 88.01, -88, 1e-30, -126, 50} {
		src = append(src, v)
	}
	for _, sign := range []float32{1, -1} {
		for _, m := range []float32{0, 3.5, -2} {
			for _, n := range []int{0, 3, 8, 13, len(src)} {
				got := make([]float32, n)
				expSub(got, src[:n], m, sign)
				for i, v := range src[:n] {
					if want := expf(sign*v - m); math.Float32bits(got[i]) != math.Float32bits(want) {
						t.Fatalf("sign %v m %v n %d: exp(%v) = %v, expf %v", sign, m, n, sign*v-m, got[i], want)
					}
				}
			}
		}
	}
}

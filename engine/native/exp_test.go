package native

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tandem-serve/tandem/engine"
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

// The temperature draw's weights are the same bits as expf((v-mx)/T) one at a
// time, whatever the temperature, so a vectorised draw picks what the scalar
// one did (a prefill and a decode worker agree on a token, and so do releases).
func TestTemperatureWeightsAreScalarBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, temp := range []float32{0.3, 0.7, 1, 1.3, 2} {
		for _, n := range []int{1, 7, 8, 9, 1000, 49152} {
			logits := make([]float32, n)
			for i := range logits {
				logits[i] = float32(rng.NormFloat64() * 4)
			}
			var s sampler
			s.sample(logits, n, engine.Sampling{Temperature: temp, Seed: 1}, 0)
			mx, inv := slices.Max(logits), 1/temp
			for i, v := range logits {
				if want := expf((v - mx) * inv); math.Float32bits(s.probs[i]) != math.Float32bits(want) {
					t.Fatalf("temperature %g, %d logits: weight %d is %g, one at a time %g", temp, n, i, s.probs[i], want)
				}
			}
		}
	}
}

// maxf is slices.Max on every length and position of the maximum.
func TestMaxf(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for n := 1; n < 40; n++ {
		for range 20 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			if got, want := maxf(x), slices.Max(x); got != want {
				t.Fatalf("maxf(%v) = %g, want %g", x, got, want)
			}
		}
	}
}

package native

import (
	"math/rand/v2"
	"os"
	"testing"

	"github.com/tandem-serve/tandem/constrain"
	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/tokenizer"
)

// BenchmarkConstrainedDraw measures what a constraint adds to one draw, without
// the forward pass: the unconstrained draw, the check, and (when refused) the
// mask applied and the token drawn again, over SmolLM2's 49,152 ids spelled as
// cl100k_base's first 49,152 tokens, random logits (so most first picks are
// refused, the worst case), the schema of bench/testdata/records-schema.json,
// its automaton warm as a server's cache holds it after the first request.
func BenchmarkConstrainedDraw(b *testing.B) {
	const vocab = 49152
	tok, err := tokenizer.CL100K()
	if err != nil {
		b.Fatal(err)
	}
	schema, err := os.ReadFile("../../bench/testdata/records-schema.json")
	if err != nil {
		b.Fatal(err)
	}
	a, err := constrain.NewCache(vocabulary(tok, vocab), 1).Automaton(constrain.Spec{JSONSchema: string(schema)})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([][]float32, 64)
	for i := range rows {
		rows[i] = make([]float32, vocab)
		for j := range rows[i] {
			rows[i][j] = float32(rng.NormFloat64() * 3)
		}
	}
	for _, temp := range []float32{0, 1} {
		name := map[float32]string{0: "greedy", 1: "temperature=1"}[temp]
		b.Run(name+"/unconstrained", func(b *testing.B) {
			var smp sampler
			sp := engine.Sampling{Temperature: temp, Seed: 3}
			i := 0
			for b.Loop() {
				smp.sample(rows[i%len(rows)], vocab, sp, i)
				i++
			}
		})
		b.Run(name+"/constrained", func(b *testing.B) {
			sc := &sched{e: &Engine{mc: ModelConfig{VocabSize: vocab}}}
			sp := engine.Sampling{Temperature: temp, Seed: 3}
			s := &sequence{req: engine.Request{StopTokens: []uint32{EndOfText}}}
			m := a.NewMatcher()
			// Warm: one pass of 2,000 draws, as the first requests would.
			draw := func(i int) {
				tok, ok := sc.drawConstrained(s, m, rows[i%len(rows)], sp)
				if !ok || s.isStop(tok) || !m.Advance(tok) || m.Final() {
					m = a.NewMatcher()
				}
				s.tokens = append(s.tokens[:0], tok) // outputs() feeds the draw's random number
			}
			for i := range 2000 {
				draw(i)
			}
			sc.e.constrainedDraws.Store(0)
			sc.e.maskedDraws.Store(0)
			i := 0
			for b.Loop() {
				draw(i)
				i++
			}
			b.ReportMetric(float64(sc.e.maskedDraws.Load())/float64(sc.e.constrainedDraws.Load()), "masked/draw")
		})
	}
}

package native

import (
	"math"
	"reflect"
	"testing"

	"github.com/tandem-serve/tandem/engine"
)

// The definitions, on a logit vector: OpenAI's penalties count output tokens only,
// vLLM's repetition penalty prompt and output alike, logit bias adds or bans.
func TestPenalizeDefinitions(t *testing.T) {
	logits := []float32{2, -2, 1, 3, 0.5}
	tokens := []uint32{0, 1, 2, 2, 3} // prompt 0 1, output 2 2 3
	sp := engine.Sampling{PresencePenalty: 0.5, FrequencyPenalty: 0.25, RepetitionPenalty: 2, LogitBias: map[uint32]float32{4: 1, 1: -100, 99: 5}}
	penalize(logits, sp, tokens, 2, map[uint32]int{})
	want := []float32{2.0 / 2, banned, 1.0/2 - 0.25*2 - 0.5, 3.0/2 - 0.25 - 0.5, 1.5}
	for i := range want {
		if math.Abs(float64(logits[i]-want[i])) > 1e-6 {
			t.Errorf("logit %d = %g, want %g", i, logits[i], want[i])
		}
	}
}

func lpOf(lp *engine.TokenLogprobs, tok uint32) (float32, bool) {
	for _, c := range lp.Top {
		if c.Token == tok {
			return c.Logprob, true
		}
	}
	return 0, false
}

// Through the engine: a drawn token repeated is lowered by exactly the penalties in
// the reported log-probabilities; a banned token is never drawn; min_p never draws
// from the tail it cuts.
func TestPenaltiesInEngine(t *testing.T) {
	e := newTestEngine(t, Config{Model: "stories260K"})
	base := engine.Request{ID: "p", Prompt: []uint32{1, 403, 407, 261, 378}, MaxTokens: 2, Logprobs: true, TopLogprobs: 20}
	toks, lps := drainLogprobs(t, mustGenerate(t, e, base))
	t0 := toks[0]

	// Bias t0 up so it is among the likeliest at the second position in both runs;
	// the penalties then move it by exactly their sum against any other token.
	biased := base
	biased.Sampling.LogitBias = map[uint32]float32{t0: 30}
	_, blps := drainLogprobs(t, mustGenerate(t, e, biased))
	pen := biased
	pen.Sampling.PresencePenalty, pen.Sampling.FrequencyPenalty = 0.5, 0.75
	ptoks, plps := drainLogprobs(t, mustGenerate(t, e, pen))
	if ptoks[0] != t0 {
		t.Fatalf("first token %d, want %d (no output to penalize yet)", ptoks[0], t0)
	}
	var other uint32
	for _, c := range blps[1].Top {
		if _, ok := lpOf(plps[1], c.Token); ok && c.Token != t0 {
			other = c.Token
			break
		}
	}
	b0, ok1 := lpOf(blps[1], t0)
	p0, ok2 := lpOf(plps[1], t0)
	bo, _ := lpOf(blps[1], other)
	po, _ := lpOf(plps[1], other)
	if !ok1 || !ok2 {
		t.Fatalf("t0 %d not among the top at the second position: %+v / %+v", t0, blps[1], plps[1])
	}
	if got := (b0 - bo) - (p0 - po); math.Abs(float64(got)-1.25) > 1e-3 {
		t.Errorf("the repeated token's log-probability fell by %g against token %d, want 0.5+0.75", got, other)
	}

	ban := base
	ban.Sampling.LogitBias = map[uint32]float32{t0: -100}
	btoks, blps2 := drainLogprobs(t, mustGenerate(t, e, ban))
	if btoks[0] == t0 || btoks[0] != lps[0].Top[1].Token {
		t.Errorf("with %d banned the greedy token is %d, want the second likeliest %d", t0, btoks[0], lps[0].Top[1].Token)
	}
	// Prefilled remotely, the prefill worker draws the first token under the same
	// controls, and the importer the rest.
	dst := newTestEngine(t, Config{Model: "stories260K"})
	pen.ID, ban.ID = "p-remote", "b-remote"
	if rtoks, rlps := drainLogprobs(t, transfer(t, e, dst, pen, 0)); !reflect.DeepEqual(rtoks, ptoks) || !reflect.DeepEqual(rlps, plps) {
		t.Errorf("penalties, remote: %v, local %v", rtoks, ptoks)
	}
	if rtoks, rlps := drainLogprobs(t, transfer(t, e, dst, ban, 0)); !reflect.DeepEqual(rtoks, btoks) || !reflect.DeepEqual(rlps, blps2) {
		t.Errorf("ban, remote: %v, local %v", rtoks, btoks)
	}

	// min_p 0.3 at temperature 2: every draw is at least 0.3 of the likeliest's
	// probability at temperature 2, i.e. its log-probability is within 2 ln(1/0.3).
	hot := base
	hot.MaxTokens = 1
	floor := float64(lps[0].Top[0].Logprob) + 2*math.Log(0.3)
	tail := 0
	for seed := range uint64(40) {
		hot.Sampling = engine.Sampling{Temperature: 2, Seed: seed}
		htoks, hlps := drainLogprobs(t, mustGenerate(t, e, hot))
		if float64(hlps[0].Logprob) < floor {
			tail++
		}
		hot.Sampling.MinP = 0.3
		mtoks, mlps := drainLogprobs(t, mustGenerate(t, e, hot))
		if float64(mlps[0].Logprob) < floor-1e-4 {
			t.Errorf("seed %d: min_p drew %d at log-probability %g, below the cut %g", seed, mtoks[0], mlps[0].Logprob, floor)
		}
		_ = htoks
	}
	if tail == 0 {
		t.Errorf("without min_p no draw of 40 fell in the tail; the test shows nothing")
	}
}

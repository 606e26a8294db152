package native

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/tandem-serve/tandem/engine"
)

// promptLogprobs generates req and returns its prompt's logprobs.
func promptLogprobs(t *testing.T, e *Engine, req engine.Request) []engine.TokenLogprobs {
	t.Helper()
	req.PromptLogprobs = true
	st := mustGenerate(t, e, req)
	defer st.Close()
	drainLogprobs(t, st)
	ps, ok := st.(engine.PromptLogprobsStream)
	if !ok {
		t.Fatal("the stream of a request for prompt logprobs reports none")
	}
	return ps.PromptLogprobs()
}

// A prompt's logprobs are the model's own: a prompt made of greedy tokens has, at
// each of them, the logprob the engine reported when it generated it, one token at
// a time. They come out the same however the prompt is chunked (a step of 5 tokens
// against one of 512) and whether or not its prefix is already cached (it is
// computed again: a cached position has no logits).
func TestPromptLogprobsAreTheModels(t *testing.T) {
	e := newTestEngine(t, Config{Model: "stories260K"})
	head := []uint32{1, 403, 407}
	gen := engine.Request{ID: "g", Prompt: head, MaxTokens: 40, Logprobs: true, TopLogprobs: 3}
	toks, lps := drainLogprobs(t, mustGenerate(t, e, gen))
	if len(toks) < 20 {
		t.Fatalf("only %d tokens generated", len(toks))
	}
	prompt := append(append([]uint32{}, head...), toks...)
	req := engine.Request{ID: "p", Prompt: prompt, MaxTokens: 1, TopLogprobs: 3}
	got := promptLogprobs(t, e, req)
	if len(got) != len(prompt)-1 {
		t.Fatalf("%d prompt logprobs for %d tokens, want %d", len(got), len(prompt), len(prompt)-1)
	}
	for i, lp := range lps {
		p := got[len(head)-1+i]
		if math.Abs(float64(p.Logprob-lp.Logprob)) > 1e-4 || len(p.Top) != 3 || p.Top[0].Token != toks[i] {
			t.Errorf("prompt token %d (generated %d): %+v, generated with %+v", len(head)+i, i, p, lp)
		}
	}
	for i, p := range got {
		if p.Logprob > 0 || len(p.Top) != 3 || p.Logprob > p.Top[0].Logprob+1e-6 || p.Top[1].Logprob > p.Top[0].Logprob {
			t.Errorf("position %d: %+v is not a log-probability under ordered alternatives", i+1, p)
		}
	}

	small := newTestEngine(t, Config{Model: "stories260K", MaxBatchTokens: 5})
	for name, again := range map[string][]engine.TokenLogprobs{
		"chunked by 5": promptLogprobs(t, small, req),
		"cached":       promptLogprobs(t, e, req), // the prompt's blocks are in e's cache now
	} {
		if len(again) != len(got) {
			t.Fatalf("%s: %d logprobs, want %d", name, len(again), len(got))
		}
		for i := range got {
			if math.Abs(float64(again[i].Logprob-got[i].Logprob)) > 1e-4 || again[i].Top[0].Token != got[i].Top[0].Token {
				t.Errorf("%s: position %d %+v, in one pass %+v", name, i+1, again[i], got[i])
			}
		}
	}
	if s := e.Stats(); s.PrefixHitTokens != 0 {
		// gen's prompt is too short to cache, and p's must not be read from it.
		t.Errorf("prefix cache hits %d: a request for prompt logprobs reused cached blocks", s.PrefixHitTokens)
	}
}

// A prompt of one token has no logprobs to give (nothing precedes it), and a
// prefill for another worker refuses to compute them: it hands over KV only.
func TestPromptLogprobsEdges(t *testing.T) {
	e := newTestEngine(t, Config{Model: "stories260K"})
	if got := promptLogprobs(t, e, engine.Request{ID: "one", Prompt: []uint32{1}, MaxTokens: 1}); len(got) != 0 {
		t.Errorf("one-token prompt: %d logprobs", len(got))
	}
	_, err := e.Prefill(context.Background(), engine.Request{ID: "x", Prompt: []uint32{1, 403}, MaxTokens: 1, PromptLogprobs: true})
	if !errors.Is(err, engine.ErrNoPromptLogprobs) {
		t.Errorf("Prefill with prompt logprobs: %v, want ErrNoPromptLogprobs", err)
	}
}

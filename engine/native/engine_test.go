package native

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/testutil"
)

func newTestEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	if cfg.Model == "" {
		cfg.Model = "tiny"
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func generate(t *testing.T, e engine.Engine, req engine.Request) ([]uint32, engine.Stream) {
	t.Helper()
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.Drain(t, context.Background(), st), st
}

func sampled(seed uint64) engine.Sampling {
	return engine.Sampling{Temperature: 0.8, TopP: 0.95, TopK: 50, Seed: seed}
}

func waitIdle(t *testing.T, e *Engine) engine.Stats {
	t.Helper()
	// Streams release their blocks before they report the end, so this holds at once.
	s := e.Stats()
	if s.ActiveBlocks != 0 {
		t.Fatalf("blocks still active: %+v", s)
	}
	return s
}

func TestGenerateLimits(t *testing.T) {
	e := newTestEngine(t, Config{})
	prompt := testPrompt(30, 4)
	out, st := generate(t, e, engine.Request{Prompt: prompt, MaxTokens: 12})
	if len(out) != 12 || st.Finish() != engine.FinishLength {
		t.Fatalf("got %d tokens, finish %v; want 12, length", len(out), st.Finish())
	}
	if u := st.Usage(); u.PromptTokens != 30 || u.CompletionTokens != 12 {
		t.Fatalf("usage %+v", u)
	}
	if distinct := len(slices.Compact(slices.Sorted(slices.Values(out)))); distinct < 4 {
		t.Errorf("greedy output is degenerate: %v", out)
	}
	// Stopping on the fifth token ends before it, without emitting it.
	stopped, st := generate(t, e, engine.Request{Prompt: prompt, MaxTokens: 12, StopTokens: []uint32{out[4]}})
	first := slices.Index(out, out[4])
	if !slices.Equal(stopped, out[:first]) || st.Finish() != engine.FinishStop {
		t.Fatalf("with stop token %d: got %v (%v), want %v", out[4], stopped, st.Finish(), out[:first])
	}
	// The context fills: a prompt one short of it gets one token.
	long := testPrompt(e.Info().ContextLength, 5)
	got, st := generate(t, e, engine.Request{Prompt: long[:len(long)-1]})
	if len(got) != 2 || st.Finish() != engine.FinishLength {
		t.Fatalf("at the end of the context: %d tokens, %v", len(got), st.Finish())
	}
	if _, err := e.Generate(context.Background(), engine.Request{Prompt: append(long, 1)}); !errors.Is(err, engine.ErrPromptTooLong) {
		t.Fatalf("over-long prompt: %v", err)
	}
	waitIdle(t, e)
}

func TestSamplingDeterministic(t *testing.T) {
	e := newTestEngine(t, Config{})
	prompt := testPrompt(25, 6)
	for _, sp := range []engine.Sampling{
		{Temperature: 1, Seed: 7},
		{Temperature: 0.7, TopK: 20, Seed: 7},
		{Temperature: 0.9, TopP: 0.8, Seed: 7},
		sampled(7),
	} {
		a, _ := generate(t, e, engine.Request{Prompt: prompt, MaxTokens: 10, Sampling: sp})
		b, _ := generate(t, e, engine.Request{Prompt: prompt, MaxTokens: 10, Sampling: sp})
		sp.Seed = 8
		c, _ := generate(t, e, engine.Request{Prompt: prompt, MaxTokens: 10, Sampling: sp})
		if !slices.Equal(a, b) {
			t.Errorf("%+v: same seed gave %v then %v", sp, a, b)
		}
		if slices.Equal(a, c) {
			t.Errorf("%+v: seeds 7 and 8 both gave %v", sp, a)
		}
	}
}

func TestSamplerTopKAndTopP(t *testing.T) {
	logits := make([]float32, VocabSize)
	for i := range logits {
		logits[i] = -10
	}
	logits[5], logits[9], logits[77] = 3, 2.9, 2.8
	var s sampler
	seen := map[uint32]bool{}
	for k := range 200 {
		tok := s.sample(logits, VocabSize, engine.Sampling{Temperature: 1, TopK: 2, Seed: 1}, k)
		seen[tok] = true
		if s.sample(logits, VocabSize, engine.Sampling{Temperature: 1, TopK: 2, Seed: 1}, k) != tok {
			t.Fatal("draw is not a function of (seed, position, logits)")
		}
	}
	if len(seen) != 2 || !seen[5] || !seen[9] {
		t.Fatalf("top-2 drew %v", seen)
	}
	for k := range 50 {
		if tok := s.sample(logits, VocabSize, engine.Sampling{Temperature: 1, TopP: 0.3, Seed: 2}, k); tok != 5 {
			t.Fatalf("top-p 0.3 drew %d, want only the best token", tok)
		}
	}
	if tok := s.sample(logits, VocabSize, engine.Sampling{}, 0); tok != 5 {
		t.Fatalf("greedy drew %d", tok)
	}
}

// Sequences decoded together must produce exactly what each produces alone.
func TestBatchedDecodeMatchesUnbatched(t *testing.T) {
	reqs := []engine.Request{
		{ID: "a", Prompt: testPrompt(17, 10), MaxTokens: 20, Sampling: sampled(1)},
		{ID: "b", Prompt: testPrompt(40, 11), MaxTokens: 20},
		{ID: "c", Prompt: testPrompt(5, 12), MaxTokens: 20, Sampling: sampled(3)},
	}
	alone := make([][]uint32, len(reqs))
	for i, r := range reqs {
		alone[i], _ = generate(t, newTestEngine(t, Config{}), r)
	}
	// A small token budget forces chunked prefill alongside decodes.
	e := newTestEngine(t, Config{MaxBatchTokens: 8})
	streams := make([]engine.Stream, len(reqs))
	for i, r := range reqs {
		var err error
		if streams[i], err = e.Generate(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range streams {
		if got := testutil.Drain(t, context.Background(), st); !slices.Equal(got, alone[i]) {
			t.Errorf("%s: batched %v, alone %v", reqs[i].ID, got, alone[i])
		}
	}
	waitIdle(t, e)
	// Three 20-token generations started together must have shared forward passes;
	// otherwise this test compared unbatched with unbatched.
	if got := e.MaxDecodeBatch(); got < 2 {
		t.Errorf("at most %d sequence decoded per forward pass; the requests were never batched", got)
	}
}

// A prompt whose prefix is cached must continue exactly as a cold run does.
func TestPrefixCacheHitMatchesCold(t *testing.T) {
	base := testPrompt(70, 20)
	prompt := append(slices.Clone(base[:50]), testPrompt(9, 21)...)
	req := engine.Request{Prompt: prompt, MaxTokens: 16, Sampling: sampled(9)}
	cold, _ := generate(t, newTestEngine(t, Config{}), req)

	e := newTestEngine(t, Config{})
	generate(t, e, engine.Request{Prompt: base, MaxTokens: 3})
	if got := e.CachedPrefix(prompt); got != 48 {
		t.Fatalf("CachedPrefix = %d, want 48", got)
	}
	before := e.Stats()
	warm, st := generate(t, e, req)
	if st.Usage().CachedTokens != 48 {
		t.Fatalf("usage %+v, want 48 cached", st.Usage())
	}
	// The engine's prefix cache counters, as vLLM's: the request's prompt queried, 48 tokens hit.
	if after := e.Stats(); after.PrefixQueryTokens-before.PrefixQueryTokens != uint64(len(prompt)) ||
		after.PrefixHitTokens-before.PrefixHitTokens != 48 {
		t.Errorf("prefix cache counters went from %d/%d to %d/%d (hits/queries), want +48/+%d",
			before.PrefixHitTokens, before.PrefixQueryTokens, after.PrefixHitTokens, after.PrefixQueryTokens, len(prompt))
	}
	if !slices.Equal(warm, cold) {
		t.Fatalf("warm %v, cold %v", warm, cold)
	}
	waitIdle(t, e)
}

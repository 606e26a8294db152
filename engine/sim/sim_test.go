package sim_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/engine/sim/simtest"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
)

func prompt(n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(i*31 + 5)
	}
	return p
}

func generate(t *testing.T, e *sim.Engine, req engine.Request) ([]uint32, engine.Stream) {
	t.Helper()
	s, err := e.Generate(rpctest.Context(t), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return testutil.Drain(t, rpctest.Context(t), s), s
}

func TestGenerateLengthAndUsage(t *testing.T) {
	e := simtest.New(t, nil)
	p := prompt(40)
	toks, s := generate(t, e, engine.Request{Prompt: p, MaxTokens: 9})
	if len(toks) != 9 || s.Finish() != engine.FinishLength {
		t.Fatalf("%d tokens finishing %v, want 9 and length", len(toks), s.Finish())
	}
	if u := s.Usage(); u.PromptTokens != 40 || u.CompletionTokens != 9 {
		t.Errorf("usage %+v", u)
	}
	// The same prompt again hits the prefix cache: its full blocks but the last
	// token's (which is always computed), counted as vLLM counts them.
	_, s = generate(t, e, engine.Request{Prompt: p, MaxTokens: 1})
	hit := s.Usage().CachedTokens
	if st := e.Stats(); hit == 0 || st.PrefixQueryTokens != 80 || st.PrefixHitTokens != uint64(hit) {
		t.Errorf("after the same prompt twice (%d cached the second time): prefix cache %d hits of %d queried, want %d of 80",
			hit, st.PrefixHitTokens, st.PrefixQueryTokens, hit)
	}
	vocab := e.Info().VocabSize
	for _, tok := range toks {
		if int(tok) >= vocab {
			t.Errorf("token %d outside the vocabulary of %d", tok, vocab)
		}
	}
	// Without max tokens the sequence runs to the context's end.
	cfgCtx := 64
	small := simtest.New(t, func(c *sim.Config) { c.ContextLength = cfgCtx })
	toks, s = generate(t, small, engine.Request{Prompt: prompt(50)})
	if len(toks) != cfgCtx-50 || s.Finish() != engine.FinishLength {
		t.Fatalf("unbounded: %d tokens finishing %v, want %d (the context's end)", len(toks), s.Finish(), cfgCtx-50)
	}
}

func TestDeterministicAcrossInstances(t *testing.T) {
	a, b := simtest.New(t, nil), simtest.New(t, nil)
	p := prompt(33)
	for _, smp := range []engine.Sampling{{}, {Temperature: 0.9, Seed: 3}} {
		ta, _ := generate(t, a, engine.Request{Prompt: p, MaxTokens: 16, Sampling: smp})
		tb, _ := generate(t, b, engine.Request{Prompt: p, MaxTokens: 16, Sampling: smp})
		if !slices.Equal(ta, tb) {
			t.Fatalf("sampling %+v: instances disagree: %v vs %v", smp, ta, tb)
		}
	}
	greedy, _ := generate(t, a, engine.Request{Prompt: p, MaxTokens: 16})
	seeded, _ := generate(t, a, engine.Request{Prompt: p, MaxTokens: 16, Sampling: engine.Sampling{Temperature: 1, Seed: 3}})
	if slices.Equal(greedy, seeded) {
		t.Error("sampling with a seed gives the greedy tokens")
	}
	// Greedy ignores the seed.
	g2, _ := generate(t, a, engine.Request{Prompt: p, MaxTokens: 16, Sampling: engine.Sampling{Seed: 99}})
	if !slices.Equal(greedy, g2) {
		t.Error("greedy decoding depends on the seed")
	}
	// A different engine seed is a different model.
	c := simtest.New(t, func(c *sim.Config) { c.Seed = 2 })
	other, _ := generate(t, c, engine.Request{Prompt: p, MaxTokens: 16})
	if slices.Equal(greedy, other) {
		t.Error("engines with different seeds give the same tokens")
	}
}

func TestStopToken(t *testing.T) {
	e := simtest.New(t, nil)
	p := prompt(20)
	free, _ := generate(t, e, engine.Request{Prompt: p, MaxTokens: 12})
	at := 5
	for slices.Contains(free[:at], free[at]) {
		at++
	}
	toks, s := generate(t, e, engine.Request{Prompt: p, MaxTokens: 12, StopTokens: []uint32{999999, free[at]}})
	if !slices.Equal(toks, free[:at]) || s.Finish() != engine.FinishStop {
		t.Fatalf("stop on %d: %v finishing %v, want %v and stop", free[at], toks, s.Finish(), free[:at])
	}
	if s.Usage().CompletionTokens != at {
		t.Errorf("completion tokens %d, want %d (the stop token is not counted)", s.Usage().CompletionTokens, at)
	}
}

func TestPrefillImportMatchesGenerate(t *testing.T) {
	src, dst := simtest.New(t, nil), simtest.New(t, nil)
	p := prompt(70)
	smp := engine.Sampling{Temperature: 0.5, Seed: 11}
	local, _ := generate(t, simtest.New(t, nil), engine.Request{Prompt: p, MaxTokens: 10, Sampling: smp})

	exp, err := src.Prefill(rpctest.Context(t), engine.Request{Prompt: p, Sampling: smp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exp.Release)
	if exp.FirstToken() != local[0] {
		t.Fatalf("prefill's first token %d, Generate's %d", exp.FirstToken(), local[0])
	}
	layout := src.Info().Layout
	if exp.NumBlocks() != (70+layout.BlockSize-1)/layout.BlockSize {
		t.Fatalf("%d blocks for 70 tokens", exp.NumBlocks())
	}
	imp, err := dst.Import(rpctest.Context(t), engine.Request{Prompt: p, Sampling: smp, MaxTokens: 10},
		engine.ImportSpec{FirstToken: exp.FirstToken(), NumBlocks: exp.NumBlocks(), Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	// Blocks may arrive in any order.
	for i := exp.NumBlocks() - 1; i >= 0; i-- {
		b, err := exp.AppendBlock(nil, i)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != layout.BlockBytes {
			t.Fatalf("block %d has %d bytes, layout says %d", i, len(b), layout.BlockBytes)
		}
		if err := imp.WriteBlock(i, b); err != nil {
			t.Fatalf("WriteBlock(%d): %v", i, err)
		}
	}
	s, err := imp.Commit(rpctest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if got := testutil.Drain(t, rpctest.Context(t), s); !slices.Equal(got, local) {
		t.Fatalf("imported sequence decodes %v, local Generate %v", got, local)
	}
	if _, err := exp.AppendBlock(nil, exp.NumBlocks()); err == nil {
		t.Error("AppendBlock past the last block succeeded")
	}
}

func TestImportRejects(t *testing.T) {
	src, dst := simtest.New(t, nil), simtest.New(t, nil)
	p := prompt(40)
	exp, err := src.Prefill(rpctest.Context(t), engine.Request{Prompt: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exp.Release)
	spec := engine.ImportSpec{FirstToken: exp.FirstToken(), NumBlocks: exp.NumBlocks(), Layout: src.Info().Layout}

	wrong := spec
	wrong.Layout.Fingerprint = "sim/seed=2"
	if _, err := dst.Import(rpctest.Context(t), engine.Request{Prompt: p}, wrong); !errors.Is(err, engine.ErrLayoutMismatch) {
		t.Errorf("KV from other weights: %v, want ErrLayoutMismatch", err)
	}
	short := spec
	short.NumBlocks--
	if _, err := dst.Import(rpctest.Context(t), engine.Request{Prompt: p}, short); !errors.Is(err, engine.ErrBadBlock) {
		t.Errorf("too few blocks for the prompt: %v, want ErrBadBlock", err)
	}

	imp, err := dst.Import(rpctest.Context(t), engine.Request{Prompt: p, MaxTokens: 4}, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Another prompt's block is not this one's, even at the same index. (A prompt
	// that only extends this one shares its full blocks' KV; this one differs in
	// its first token.)
	op := prompt(40)
	op[0]++
	other, err := src.Prefill(rpctest.Context(t), engine.Request{Prompt: op})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Release)
	b0, _ := other.AppendBlock(nil, 1)
	if err := imp.WriteBlock(1, b0); !errors.Is(err, engine.ErrBadBlock) {
		t.Errorf("another prompt's block: %v, want ErrBadBlock", err)
	}
	b, _ := exp.AppendBlock(nil, 0)
	if err := imp.WriteBlock(exp.NumBlocks(), b); !errors.Is(err, engine.ErrBadBlock) {
		t.Errorf("index past the end: %v, want ErrBadBlock", err)
	}
	if err := imp.WriteBlock(0, b); err != nil {
		t.Fatal(err)
	}
	if _, err := imp.Commit(rpctest.Context(t)); !errors.Is(err, engine.ErrBadBlock) {
		t.Errorf("Commit with blocks missing: %v, want ErrBadBlock", err)
	}
	// The failed import released what it held.
	exp.Release()
	other.Release()
	if st := dst.Stats(); st.ActiveBlocks != 0 {
		t.Errorf("%d blocks still held after a failed import", st.ActiveBlocks)
	}
}

func TestBlocksAccounting(t *testing.T) {
	e := simtest.New(t, func(c *sim.Config) { c.NumBlocks = 10 })
	// 40 prompt + 8 output = 48 tokens = 3 blocks.
	s, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: prompt(40), MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.ActiveBlocks != 3 || st.FreeBlocks != 7 || st.TotalBlocks != 10 {
		t.Errorf("stats with one 3-block sequence: %+v", st)
	}
	// What could never fit the pool is refused at once (what fits later waits:
	// admit_test.go).
	if _, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: prompt(100), MaxTokens: 100}); !errors.Is(err, engine.ErrNoBlocks) {
		t.Errorf("13 blocks from a pool of 10: %v, want ErrNoBlocks", err)
	}
	// Closing a stream mid-way frees its blocks at once.
	if _, err := s.Next(rpctest.Context(t)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if st := e.Stats(); st.ActiveBlocks != 0 || st.Running != 0 {
		t.Errorf("after Close: %+v", st)
	}
	// Cancelling the request's context ends the stream and frees its blocks.
	ctx, cancel := context.WithCancel(rpctest.Context(t))
	s2, err := e.Generate(ctx, engine.Request{Prompt: prompt(40), MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Close)
	cancel()
	for range 100 {
		if _, err := s2.Next(rpctest.Context(t)); err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatalf("cancelled stream ended as if finished (%v)", s2.Finish())
			}
			break
		}
	}
	if s2.Finish() != engine.FinishCancelled {
		t.Errorf("cancelled stream finished %v", s2.Finish())
	}
	s2.Close()
	if st := e.Stats(); st.ActiveBlocks != 0 {
		t.Errorf("after cancel: %+v", st)
	}
}

func TestRejectsBadRequests(t *testing.T) {
	e := simtest.New(t, func(c *sim.Config) { c.ContextLength = 32 })
	if _, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: prompt(32)}); !errors.Is(err, engine.ErrPromptTooLong) {
		t.Errorf("prompt filling the context: %v, want ErrPromptTooLong", err)
	}
	if _, err := e.Prefill(rpctest.Context(t), engine.Request{Prompt: prompt(40)}); !errors.Is(err, engine.ErrPromptTooLong) {
		t.Errorf("Prefill of a prompt over the context: %v, want ErrPromptTooLong", err)
	}
	if _, err := e.Generate(rpctest.Context(t), engine.Request{}); err == nil {
		t.Error("empty prompt accepted")
	}
	_ = e.Close()
	if _, err := e.Generate(rpctest.Context(t), engine.Request{Prompt: prompt(4)}); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("Generate after Close: %v, want ErrClosed", err)
	}
	if _, err := sim.New(sim.Config{}); err == nil {
		t.Error("zero config accepted")
	}
}

// The sim engine's tokens are placeholders: a constraint it cannot enforce is
// refused, not ignored.
func TestConstraintRefused(t *testing.T) {
	e := simtest.New(t, nil)
	_, err := e.Generate(context.Background(), engine.Request{Prompt: []uint32{1, 2, 3},
		Sampling: engine.Sampling{Constraint: &engine.Constraint{JSONSchema: "{}"}}})
	if !errors.Is(err, engine.ErrBadConstraint) || !strings.Contains(err.Error(), "native") {
		t.Fatalf("got %v, want ErrBadConstraint naming the engines that enforce it", err)
	}
}

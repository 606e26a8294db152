package native

import (
	"context"
	"errors"
	"io"
	"math"
	"reflect"
	"testing"

	"github.com/tandem-serve/tandem/engine"
)

// drainLogprobs reads a stream to its end with each token's logprobs.
func drainLogprobs(t *testing.T, st engine.Stream) ([]uint32, []*engine.TokenLogprobs) {
	t.Helper()
	var toks []uint32
	var lps []*engine.TokenLogprobs
	for {
		tok, err := st.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return toks, lps
		}
		if err != nil {
			t.Fatal(err)
		}
		toks, lps = append(toks, tok), append(lps, st.Logprobs())
	}
}

// Logprobs come from the model's raw logits: greedy's token is the most likely one,
// the top list is ordered and normalised, sampling does not change them, and a
// remote prefill's first token carries the same numbers as a local one.
func TestLogprobs(t *testing.T) {
	src := newTestEngine(t, Config{Model: "stories260K"})
	dst := newTestEngine(t, Config{Model: "stories260K"})
	req := engine.Request{ID: "lp", Prompt: []uint32{1, 403, 407, 261, 378}, MaxTokens: 8, Logprobs: true, TopLogprobs: 5}

	toks, lps := drainLogprobs(t, mustGenerate(t, src, req))
	if len(lps) != len(toks) || len(toks) != 8 {
		t.Fatalf("%d tokens, %d logprobs", len(toks), len(lps))
	}
	for i, lp := range lps {
		if lp == nil || len(lp.Top) != 5 {
			t.Fatalf("token %d: logprobs %+v", i, lp)
		}
		if lp.Top[0].Token != toks[i] || lp.Top[0].Logprob != lp.Logprob {
			t.Errorf("token %d: greedy drew %d (%g) but the most likely is %+v", i, toks[i], lp.Logprob, lp.Top[0])
		}
		var mass float64
		for k, c := range lp.Top {
			mass += math.Exp(float64(c.Logprob))
			if c.Logprob > 0 || k > 0 && c.Logprob > lp.Top[k-1].Logprob {
				t.Errorf("token %d: top %v not ordered log-probabilities", i, lp.Top)
			}
		}
		if mass > 1+1e-5 {
			t.Errorf("token %d: the top 5 hold probability %g > 1", i, mass)
		}
	}

	// Sampled at a temperature, the drawn token's logprob is still the model's.
	hot := req
	hot.Sampling = engine.Sampling{Temperature: 1.5, Seed: 9}
	htoks, hlps := drainLogprobs(t, mustGenerate(t, src, hot))
	if htoks[0] == toks[0] && !reflect.DeepEqual(hlps[0], lps[0]) {
		t.Errorf("same first token, different logprobs: %+v vs %+v", hlps[0], lps[0])
	}

	// Remote: the prefill worker's first token brings its logprobs; the rest are the
	// importer's own, over identical KV.
	rtoks, rlps := drainLogprobs(t, transfer(t, src, dst, req, 0))
	if !reflect.DeepEqual(rtoks, toks) || !reflect.DeepEqual(rlps, lps) {
		t.Errorf("remote path: %v %+v\nlocal: %v %+v", rtoks, rlps[0], toks, lps[0])
	}

	// Not asked, none computed.
	plain := req
	plain.Logprobs, plain.TopLogprobs = false, 0
	if _, l := drainLogprobs(t, mustGenerate(t, src, plain)); l[0] != nil {
		t.Errorf("logprobs %+v for a request that did not ask", l[0])
	}
	bad := req
	bad.TopLogprobs = 21
	if _, err := src.Generate(context.Background(), bad); err == nil {
		t.Error("21 top logprobs accepted")
	}
}

func mustGenerate(t *testing.T, e *Engine, req engine.Request) engine.Stream {
	t.Helper()
	st, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

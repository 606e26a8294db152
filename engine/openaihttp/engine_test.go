package openaihttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/engine/sglang"
	"github.com/tandem-serve/tandem/engine/trtllm"
	"github.com/tandem-serve/tandem/engine/vllm"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
	"github.com/tandem-serve/tandem/tokenizer"
)

func cl100k(t *testing.T) tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.CL100K()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func dialect(k fakeengine.Kind) openaihttp.Dialect {
	switch k {
	case fakeengine.TRTLLM:
		return trtllm.Dialect()
	case fakeengine.SGLang:
		return sglang.Dialect(sglang.Bootstrap{Host: "10.0.0.9", Port: 8998})
	}
	return vllm.Dialect()
}

func connect(t *testing.T, f *fakeengine.Server, mode openaihttp.TokenMode) *openaihttp.Engine {
	t.Helper()
	e, err := openaihttp.New(t.Context(), openaihttp.Config{
		URL: f.URL(), Dialect: dialect(f.Kind), Tokenizer: cl100k(t), BlockSize: 16, TokenMode: mode,
		MetricsInterval: 20 * time.Millisecond, ContextLength: 4096,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// The local path sends exactly the documented body (token ids in, token ids
// asked back) and streams the engine's token ids; the served model id and the
// context length come from /v1/models.
func TestGenerateBody(t *testing.T) {
	for _, c := range []struct {
		kind fakeengine.Kind
		body string
	}{
		{fakeengine.VLLM, `{"model":"fake-model","prompt":[1,2,3],"max_tokens":4,"temperature":0.5,"top_p":0.9,"top_k":40,"seed":7,"stream":true,` +
			`"stream_options":{"include_usage":true},"stop_token_ids":[99],"ignore_eos":true,"return_token_ids":true}`},
		{fakeengine.SGLang, `{"model":"fake-model","prompt":[1,2,3],"max_tokens":4,"temperature":0.5,"top_p":0.9,"top_k":40,"seed":7,"stream":true,` +
			`"stream_options":{"include_usage":true},"stop_token_ids":[99],"ignore_eos":true,"return_token_ids":true}`},
		{fakeengine.TRTLLM, `{"model":"fake-model","prompt":[1,2,3],"max_tokens":4,"temperature":0.5,"top_p":0.9,"top_k":40,"seed":7,"stream":true,` +
			`"stream_options":{"include_usage":true},"stop_token_ids":[99],"ignore_eos":true,"detokenize":false}`},
	} {
		t.Run(string(c.kind), func(t *testing.T) {
			f := (&fakeengine.Server{Kind: c.kind, TokenIDs: true}).Start(t)
			e := connect(t, f, openaihttp.TokenAuto)
			if e.TokenMode() != openaihttp.TokenIDs {
				t.Fatalf("token mode %s, want token_ids", e.TokenMode())
			}
			if info := e.Info(); info.Model != "fake-model" || info.Engine != string(c.kind) || info.Layout.Fingerprint != string(c.kind)+"/fake-model" {
				t.Errorf("info %+v", info)
			}
			s, err := e.Generate(t.Context(), engine.Request{ID: "req-1", Prompt: []uint32{1, 2, 3}, MaxTokens: 4, StopTokens: []uint32{99},
				Sampling: engine.Sampling{Temperature: 0.5, TopP: 0.9, TopK: 40, Seed: 7}})
			if err != nil {
				t.Fatal(err)
			}
			if got := testutil.Drain(t, t.Context(), s); !slices.Equal(got, []uint32{11, 12, 13, 14}) {
				t.Errorf("tokens %v", got)
			}
			if s.Finish() != engine.FinishLength || s.Usage().CompletionTokens != 4 || s.Usage().PromptTokens != 3 {
				t.Errorf("finish %v usage %+v", s.Finish(), s.Usage())
			}
			reqs := f.Completions()
			if len(reqs) != 1 || string(reqs[0].Body) != c.body || reqs[0].RequestID != "req-1" {
				t.Errorf("sent %d requests; body\n%s\nwant\n%s", len(reqs), reqs[0].Body, c.body)
			}
		})
	}
}

// TRT-LLM does not report max_model_len: the worker must be told.
func TestContextLengthRequired(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.TRTLLM, TokenIDs: true}).Start(t)
	_, err := openaihttp.New(t.Context(), openaihttp.Config{URL: f.URL(), Dialect: trtllm.Dialect(), Tokenizer: cl100k(t), BlockSize: 16})
	if !errors.Is(err, openaihttp.ErrNoContextLength) || !strings.Contains(err.Error(), "max_model_len") {
		t.Fatalf("New: %v", err)
	}
}

// Engines that stream no token ids still work: logprob token ids where the engine
// names tokens by id, else the text tokenized here.
func TestTokenModes(t *testing.T) {
	tok := cl100k(t)
	words := tok.Encode(" Once upon a time, a little fox")
	for _, c := range []struct {
		name                 string
		tokenIDs, logprobIDs bool
		want                 openaihttp.TokenMode
	}{
		{"return_token_ids", true, true, openaihttp.TokenIDs},
		{"logprobs", false, true, openaihttp.LogprobTokens},
		{"text", false, false, openaihttp.TextTokens},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: c.tokenIDs, LogprobIDs: c.logprobIDs, Output: words,
				Text: func(id uint32) string { return tok.Decode([]uint32{id}) }}).Start(t)
			e := connect(t, f, openaihttp.TokenAuto)
			if e.TokenMode() != c.want {
				t.Fatalf("token mode %s, want %s", e.TokenMode(), c.want)
			}
			s, err := e.Generate(t.Context(), engine.Request{ID: "r", Prompt: []uint32{1}, MaxTokens: len(words)})
			if err != nil {
				t.Fatal(err)
			}
			if got := testutil.Drain(t, t.Context(), s); !slices.Equal(got, words) {
				t.Errorf("tokens %v, want %v", got, words)
			}
		})
	}
}

// A stop token ends the stream and is not returned, whether or not the engine
// put it in its token ids.
func TestStopToken(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true, Output: []uint32{11, 12, 99, 13}}).Start(t)
	e := connect(t, f, openaihttp.TokenIDs)
	s, err := e.Generate(t.Context(), engine.Request{ID: "r", Prompt: []uint32{1}, MaxTokens: 8, StopTokens: []uint32{99}})
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.Drain(t, t.Context(), s); !slices.Equal(got, []uint32{11, 12}) || s.Finish() != engine.FinishStop {
		t.Errorf("tokens %v finish %v", got, s.Finish())
	}
}

// Logprobs asked for come back, the alternatives named by id.
func TestLogprobs(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true, LogprobIDs: true}).Start(t)
	e := connect(t, f, openaihttp.TokenIDs)
	s, err := e.Generate(t.Context(), engine.Request{ID: "r", Prompt: []uint32{1}, MaxTokens: 2, Logprobs: true, TopLogprobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Next(t.Context()); err != nil {
		t.Fatal(err)
	}
	lp := s.Logprobs()
	if lp == nil || lp.Logprob != -0.5 || len(lp.Top) != 2 || lp.Top[0].Token != 11 || lp.Top[1].Token != 12 {
		t.Errorf("logprobs %+v", lp)
	}
	var body struct {
		Logprobs               *int `json:"logprobs"`
		ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`
	}
	_ = json.Unmarshal(f.Completions()[0].Body, &body)
	if body.Logprobs == nil || *body.Logprobs != 2 || !body.ReturnTokensAsTokenIDs {
		t.Errorf("body %s", f.Completions()[0].Body)
	}
}

// Closing a stream, or cancelling its context, cancels the engine's HTTP request.
func TestCancelReachesEngine(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true, TokenDelay: 20 * time.Millisecond}).Start(t)
	e := connect(t, f, openaihttp.TokenIDs)
	ctx, cancel := context.WithCancel(t.Context())
	s, err := e.Generate(ctx, engine.Request{ID: "req-cancel", Prompt: []uint32{1}, MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after cancel: %v", err)
	}
	select {
	case id := <-f.Cancelled():
		if id != "req-cancel" {
			t.Errorf("engine saw %q cancelled", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the engine never saw the request cancelled")
	}
}

// Close may run on another goroutine while Next is reading, and Next may be
// given a new context at any token (which rebinds the stream's cancellation):
// run under -race, the two must not race, and the reader ends with the
// cancellation, not a hang.
func TestNextAndCloseConcurrently(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true, TokenDelay: time.Millisecond}).Start(t)
	e := connect(t, f, openaihttp.TokenIDs)
	ctxs := [2]context.Context{t.Context(), context.WithValue(t.Context(), struct{}{}, 1)}
	for i := range 20 { // fewer than the fake's 64 cancellation slots
		s, err := e.Generate(t.Context(), engine.Request{ID: "req-race", Prompt: []uint32{1}, MaxTokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		first, ended := make(chan struct{}), make(chan error, 1)
		go func() {
			for n := 0; ; n++ {
				if _, err := s.Next(ctxs[n%2]); err != nil {
					ended <- err
					return
				}
				if n == i%3 {
					close(first)
				}
			}
		}()
		select {
		case <-first:
		case err := <-ended:
			t.Fatalf("stream %d ended before Close: %v", i, err)
		}
		s.Close()
		select {
		case err := <-ended:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("stream %d: Next after Close: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %d: Next still running 10s after Close", i)
		}
	}
}

// Next binds the context it is given; a later Next with another context
// replaces that binding, so ending the first context no longer aborts the
// stream, and ending the second does.
func TestNextRebindsContext(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true, TokenDelay: 5 * time.Millisecond}).Start(t)
	e := connect(t, f, openaihttp.TokenIDs)
	s, err := e.Generate(t.Context(), engine.Request{ID: "req-rebind", Prompt: []uint32{1}, MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx1, cancel1 := context.WithCancel(t.Context())
	ctx2, cancel2 := context.WithCancel(t.Context())
	defer cancel2()
	for _, ctx := range []context.Context{ctx1, ctx1, ctx2} {
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cancel1()
	for range 3 {
		if _, err := s.Next(ctx2); err != nil {
			t.Fatalf("Next after the replaced context ended: %v", err)
		}
	}
	cancel2()
	for {
		if _, err := s.Next(ctx2); err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Next after its context ended: %v", err)
			}
			break
		}
	}
}

// Load comes from each engine's own metric names.
func TestLoad(t *testing.T) {
	for _, k := range []fakeengine.Kind{fakeengine.VLLM, fakeengine.TRTLLM, fakeengine.SGLang} {
		t.Run(string(k), func(t *testing.T) {
			f := (&fakeengine.Server{Kind: k, TokenIDs: true, Running: 3, Waiting: 2, KVUsage: 0.25, TotalBlocks: 1000,
				PrefixQueries: 900, PrefixHits: 300}).Start(t)
			e, err := openaihttp.New(t.Context(), openaihttp.Config{URL: f.URL(), Dialect: dialect(k), Tokenizer: cl100k(t), BlockSize: 16,
				MetricsInterval: 10 * time.Millisecond, ContextLength: 4096})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			want := engine.Stats{TotalBlocks: 1000, ActiveBlocks: 250, FreeBlocks: 750, Running: 3, Waiting: 2}
			if k == fakeengine.VLLM { // the only one of the three that counts its prefix cache in tokens
				want.PrefixQueryTokens, want.PrefixHitTokens = 900, 300
			}
			if k == fakeengine.SGLang { // reports no pool size
				want = engine.Stats{TotalBlocks: openaihttp.DefaultTotalBlocks, ActiveBlocks: openaihttp.DefaultTotalBlocks / 4,
					FreeBlocks: openaihttp.DefaultTotalBlocks * 3 / 4, Running: 3, Waiting: 2}
			}
			deadline := time.Now().Add(10 * time.Second)
			for e.Stats() != want {
				if time.Now().After(deadline) {
					t.Fatalf("stats %+v, want %+v", e.Stats(), want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// A request whose stop tokens leave out the model's EOS (the frontend's
// ignore_eos, with or without a client's own stop_token_ids) tells the engine
// server so; otherwise it would stop at its model's EOS by itself.
func TestNoStopTokensIgnoresEOS(t *testing.T) {
	f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: true}).Start(t)
	e := connect(t, f, openaihttp.TokenAuto)
	eos := cl100k(t).EOS()
	for _, stops := range [][]uint32{nil, {99}, {99, eos}} {
		s, err := e.Generate(t.Context(), engine.Request{ID: "r", Prompt: []uint32{1, 2}, MaxTokens: 2, StopTokens: stops})
		if err != nil {
			t.Fatal(err)
		}
		testutil.Drain(t, t.Context(), s)
	}
	reqs := f.Completions()
	if len(reqs) != 3 {
		t.Fatalf("%d requests sent, want 3", len(reqs))
	}
	if b := string(reqs[0].Body); !strings.Contains(b, `"ignore_eos":true`) || strings.Contains(b, "stop_token_ids") {
		t.Errorf("no stop tokens sent %s; want ignore_eos", b)
	}
	if b := string(reqs[1].Body); !strings.Contains(b, `"ignore_eos":true`) || !strings.Contains(b, `"stop_token_ids":[99]`) {
		t.Errorf("a client's stop token without EOS sent %s; want it and ignore_eos", b)
	}
	if b := string(reqs[2].Body); strings.Contains(b, "ignore_eos") || !strings.Contains(b, `"stop_token_ids":[99,`) {
		t.Errorf("stop tokens with EOS sent %s; want them and no ignore_eos", b)
	}
}

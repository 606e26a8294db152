package openaihttp_test

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

// vLLM gives the prompt's logprobs only in a non-streamed answer: the request is
// sent whole with prompt_logprobs, its tokens come back as a stream as ever, and
// the prompt's logprobs are vLLM's entries for the prompt's own tokens, the
// alternatives its top ranks in order. In every token mode.
func TestPromptLogprobsVLLM(t *testing.T) {
	for _, mode := range []openaihttp.TokenMode{openaihttp.TokenIDs, openaihttp.LogprobTokens} {
		t.Run(string(mode), func(t *testing.T) {
			f := (&fakeengine.Server{Kind: fakeengine.VLLM, TokenIDs: mode == openaihttp.TokenIDs, LogprobIDs: true, Output: []uint32{7, 8, 9}}).Start(t)
			e := connect(t, f, mode)
			prompt := []uint32{100, 200, 300, 400}
			s, err := e.Generate(t.Context(), engine.Request{ID: "echo", Prompt: prompt, MaxTokens: 3, PromptLogprobs: true, TopLogprobs: 3})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var toks []uint32
			for {
				tok, err := s.Next(t.Context())
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				toks = append(toks, tok)
			}
			if len(toks) != 3 || toks[0] != 7 || toks[2] != 9 || s.Finish() != engine.FinishLength {
				t.Errorf("tokens %v finish %v", toks, s.Finish())
			}
			lps := s.(engine.PromptLogprobsStream).PromptLogprobs()
			if len(lps) != len(prompt)-1 {
				t.Fatalf("%d prompt logprobs, want %d", len(lps), len(prompt)-1)
			}
			for i, lp := range lps {
				id := prompt[i+1]
				want := []uint32{id + 1, id, id + 3}
				if math.Abs(float64(lp.Logprob)-fakeengine.PromptLogprob(i+1)) > 1e-6 || len(lp.Top) != 3 {
					t.Fatalf("position %d: %+v", i+1, lp)
				}
				for k, w := range want {
					if lp.Top[k].Token != w {
						t.Errorf("position %d: alternatives %+v, want ids %v", i+1, lp.Top, want)
						break
					}
				}
			}
			var body struct {
				Stream         bool `json:"stream"`
				PromptLogprobs *int `json:"prompt_logprobs"`
			}
			_ = json.Unmarshal(f.Completions()[0].Body, &body)
			if body.Stream || body.PromptLogprobs == nil || *body.PromptLogprobs != 3 {
				t.Errorf("body %s, want stream false and prompt_logprobs 3", f.Completions()[0].Body)
			}
		})
	}
}

// SGLang and TensorRT-LLM are asked for no prompt logprobs: refused before any
// request, with ErrNoPromptLogprobs (a 400 at the frontend).
func TestPromptLogprobsRefused(t *testing.T) {
	for _, kind := range []fakeengine.Kind{fakeengine.SGLang, fakeengine.TRTLLM} {
		f := (&fakeengine.Server{Kind: kind, TokenIDs: true}).Start(t)
		e := connect(t, f, openaihttp.TokenIDs)
		_, err := e.Generate(t.Context(), engine.Request{ID: "echo", Prompt: []uint32{1, 2}, MaxTokens: 1, PromptLogprobs: true})
		if !errors.Is(err, engine.ErrNoPromptLogprobs) || len(f.Completions()) != 0 {
			t.Errorf("%s: %v, %d requests sent; want ErrNoPromptLogprobs and none", kind, err, len(f.Completions()))
		}
	}
}

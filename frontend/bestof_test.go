package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// echoResponse is a /v1/completions body decoded with its nulls visible.
type echoResponse struct {
	Choices []struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Logprobs     *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func decodeCompletion(t *testing.T, r rawResult) echoResponse {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var out echoResponse
	if err := json.Unmarshal([]byte(r.body), &out); err != nil {
		t.Fatalf("%v: %s", err, r.body)
	}
	return out
}

// candidates answers seed s with "candidate s", every token's logprob shifted
// by shifts[s-10]: seeds 11 and 13 tie as the likeliest, 12 next, 10 last.
func candidates(t *testing.T) func(*fakeBackend) {
	tok := testTokenizer(t)
	shifts := []float32{-3, 0, -1, 0, -2, -2}
	return func(b *fakeBackend) {
		b.bySeed = func(seed uint64) ([]uint32, float32) {
			return tok.Encode(fmt.Sprintf(" candidate %d", seed)), shifts[(seed-10)%uint64(len(shifts))]
		}
	}
}

// best_of=4, n=2 generates four candidates (seeds 10 to 13, each asked for its
// logprobs) and returns the two with the highest cumulative logprob, best first,
// the earlier of a tie first; logprobs stay out of the answer unless asked, and
// usage counts every candidate's tokens.
func TestBestOfReturnsTheLikeliest(t *testing.T) {
	_, b, f := sdkSetup(t, candidates(t))
	h := f.HTTPHandler()
	out := decodeCompletion(t, do(t, h, "POST", "/v1/completions", `{"prompt":"Pick","n":2,"best_of":4,"seed":10,"temperature":1}`))
	if len(out.Choices) != 2 || out.Choices[0].Text != " candidate 11" || out.Choices[1].Text != " candidate 13" {
		t.Fatalf("choices %+v, want candidates 11 then 13", out.Choices)
	}
	for i, c := range out.Choices {
		if c.Index != i || c.Logprobs != nil {
			t.Errorf("choice %d: index %d, logprobs %+v (not asked)", i, c.Index, c.Logprobs)
		}
	}
	per := len(testTokenizer(t).Encode(" candidate 11"))
	if out.Usage.CompletionTokens != 4*per || out.Usage.PromptTokens != len(testTokenizer(t).Encode("Pick")) {
		t.Errorf("usage %+v, want %d completion tokens (four candidates) and the prompt once", out.Usage, 4*per)
	}
	reqs := b.reqsByID()
	if len(reqs) != 4 {
		t.Fatalf("%d backend requests, want 4", len(reqs))
	}
	for id, r := range reqs {
		if !r.GetSampling().GetLogprobs() {
			t.Errorf("candidate %s did not ask for logprobs, which rank it", id)
		}
	}

	// Asked for, the logprobs returned are the winners' own.
	out = decodeCompletion(t, do(t, h, "POST", "/v1/completions", `{"prompt":"Pick","n":1,"best_of":3,"seed":10,"temperature":1,"logprobs":0}`))
	if len(out.Choices) != 1 || out.Choices[0].Text != " candidate 11" || out.Choices[0].Logprobs == nil {
		t.Fatalf("choices %+v, want candidate 11 with logprobs", out.Choices)
	}
	if lp := out.Choices[0].Logprobs.TokenLogprobs; len(lp) == 0 || math.Abs(*lp[0]-0) > 1e-6 || math.Abs(*lp[1]-(-0.1)) > 1e-6 {
		t.Errorf("token logprobs %v, want candidate 11's (0, -0.1, ...)", lp)
	}

	// A batch: each prompt's best, at index prompt*n.
	out = decodeCompletion(t, do(t, h, "POST", "/v1/completions", `{"prompt":["A","B"],"best_of":3,"seed":12,"temperature":1}`))
	if len(out.Choices) != 2 || out.Choices[0].Text != " candidate 13" || out.Choices[1].Text != " candidate 13" ||
		out.Choices[1].Index != 1 {
		t.Errorf("batch choices %+v, want candidate 13 (of 12, 13, 14) for each prompt", out.Choices)
	}
}

// best_of with an engine that reports no logprobs (the sim engine) cannot rank:
// a 400 naming best_of, not an arbitrary pick.
func TestBestOfWithoutLogprobs(t *testing.T) {
	_, _, f := sdkSetup(t, func(b *fakeBackend) { candidates(t)(b); b.noLogprobs = true })
	r := do(t, f.HTTPHandler(), "POST", "/v1/completions", `{"prompt":"Pick","best_of":2,"temperature":1}`)
	if _, _, param, _ := errorShape(t, r.body); r.status != 400 || param == nil || *param != "best_of" {
		t.Errorf("%d %s, want a 400 naming best_of", r.status, r.body)
	}
}

// echo puts the prompt before the completion; with logprobs, the prompt's tokens
// come first in them, the first with null logprob and alternatives, as OpenAI's
// legacy API and vLLM show them, and text_offset runs over both.
func TestEcho(t *testing.T) {
	_, b, f := sdkSetup(t, nil)
	h := f.HTTPHandler()
	tok := testTokenizer(t)
	const prompt = "Once upon a time"
	ids := tok.Encode(prompt)
	completion := tok.Decode(tok.Encode(answer)[:3])

	out := decodeCompletion(t, do(t, h, "POST", "/v1/completions", `{"prompt":"Once upon a time","echo":true,"max_tokens":3}`))
	if c := out.Choices[0]; c.Text != prompt+completion || c.Logprobs != nil {
		t.Errorf("echo: text %q logprobs %+v, want %q and none", c.Text, c.Logprobs, prompt+completion)
	}
	if b.lastReq().GetPromptLogprobs() {
		t.Error("echo without logprobs asked the backend for the prompt's logprobs")
	}

	out = decodeCompletion(t, do(t, h, "POST", "/v1/completions", `{"prompt":"Once upon a time","echo":true,"max_tokens":3,"logprobs":1}`))
	c := out.Choices[0]
	if c.Text != prompt+completion || c.Logprobs == nil {
		t.Fatalf("echo with logprobs: %+v", c)
	}
	lp := c.Logprobs
	if len(lp.Tokens) != len(ids)+3 || len(lp.TokenLogprobs) != len(lp.Tokens) || len(lp.TopLogprobs) != len(lp.Tokens) {
		t.Fatalf("%d tokens, %d logprobs, %d tops; want %d each", len(lp.Tokens), len(lp.TokenLogprobs), len(lp.TopLogprobs), len(ids)+3)
	}
	if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
		t.Errorf("first prompt token: logprob %v top %v, want null and null", lp.TokenLogprobs[0], lp.TopLogprobs[0])
	}
	for k := 1; k < len(ids); k++ {
		if got := lp.TokenLogprobs[k]; got == nil || math.Abs(*got-(-float64(k)/100)) > 1e-6 || len(lp.TopLogprobs[k]) != 1 {
			t.Errorf("prompt token %d: logprob %v top %v, want %g", k, got, lp.TopLogprobs[k], -float64(k)/100)
		}
	}
	for j := range 3 {
		if got := lp.TokenLogprobs[len(ids)+j]; got == nil || math.Abs(*got-(-float64(j)/10)) > 1e-6 {
			t.Errorf("completion token %d: logprob %v, want %g", j, got, -float64(j)/10)
		}
	}
	if strings.Join(lp.Tokens[:len(ids)], "") != tok.Decode(ids) {
		t.Errorf("prompt tokens %q", lp.Tokens[:len(ids)])
	}
	for i := 1; i < len(lp.TextOffset); i++ {
		if lp.TextOffset[i] != lp.TextOffset[i-1]+len(lp.Tokens[i-1]) {
			t.Fatalf("text_offset %v for tokens %q", lp.TextOffset, lp.Tokens)
		}
	}
	if r := b.lastReq(); !r.GetPromptLogprobs() || r.GetSampling().GetTopLogprobs() != 1 {
		t.Errorf("backend request: prompt_logprobs %v top %d", r.GetPromptLogprobs(), r.GetSampling().GetTopLogprobs())
	}
}

// echo with max_tokens 0 and logprobs is prompt scoring, as evaluation harnesses
// (lm-eval-harness's loglikelihood) use it: the prompt alone, its tokens'
// logprobs, finish "length", nothing generated or billed; the backend is asked
// for one token, which is dropped. Token ids come back as their text.
func TestEchoScoresThePrompt(t *testing.T) {
	_, b, f := sdkSetup(t, nil)
	h := f.HTTPHandler()
	tok := testTokenizer(t)
	ids := tok.Encode("The cat sat on the mat")
	idJSON, _ := json.Marshal(ids)
	for _, body := range []string{
		`{"prompt":"The cat sat on the mat","echo":true,"max_tokens":0,"logprobs":1}`,
		`{"prompt":` + string(idJSON) + `,"echo":true,"max_tokens":0,"logprobs":1}`,
	} {
		out := decodeCompletion(t, do(t, h, "POST", "/v1/completions", body))
		c := out.Choices[0]
		if c.Text != "The cat sat on the mat" || c.FinishReason == nil || *c.FinishReason != "length" || c.Logprobs == nil {
			t.Fatalf("%s: %+v", body, c)
		}
		if len(c.Logprobs.TokenLogprobs) != len(ids) || c.Logprobs.TokenLogprobs[0] != nil || c.Logprobs.TokenLogprobs[1] == nil {
			t.Errorf("%s: token logprobs %v, want %d, the first null", body, c.Logprobs.TokenLogprobs, len(ids))
		}
		if out.Usage.CompletionTokens != 0 || out.Usage.PromptTokens != len(ids) {
			t.Errorf("%s: usage %+v", body, out.Usage)
		}
		if r := b.lastReq(); r.GetMaxTokens() != 1 || !r.GetPromptLogprobs() {
			t.Errorf("%s: backend asked for %d tokens, prompt logprobs %v", body, r.GetMaxTokens(), r.GetPromptLogprobs())
		}
	}
}

// With n=2 only the first choice's request computes the prompt's logprobs (the
// second finds the prompt cached); both choices show them. Streamed, each
// choice's first text is the prompt, with the prompt's logprobs.
func TestEchoChoicesShareThePromptLogprobs(t *testing.T) {
	_, b, f := sdkSetup(t, nil)
	h := f.HTTPHandler()
	tok := testTokenizer(t)
	const prompt = "Once upon a time"
	n := len(tok.Encode(prompt))
	out := decodeCompletion(t, do(t, h, "POST", "/v1/completions", `{"prompt":"Once upon a time","echo":true,"max_tokens":2,"logprobs":0,"n":2}`))
	for i, c := range out.Choices {
		if !strings.HasPrefix(c.Text, prompt) || c.Logprobs == nil || len(c.Logprobs.TokenLogprobs) != n+2 || c.Logprobs.TokenLogprobs[1] == nil {
			t.Errorf("choice %d: %+v", i, c)
		}
	}
	asked := 0
	for _, r := range b.reqsByID() {
		if r.GetPromptLogprobs() {
			asked++
		}
	}
	if asked != 1 {
		t.Errorf("%d of 2 backend requests asked for the prompt's logprobs, want 1", asked)
	}

	r := do(t, h, "POST", "/v1/completions", `{"prompt":"Once upon a time","echo":true,"max_tokens":2,"logprobs":0,"n":2,"stream":true}`)
	texts, firsts := map[int]string{}, map[int]*[]*float64{}
	for _, data := range sseEvents(t, r.body) {
		if data == "[DONE]" {
			continue
		}
		var ch echoResponse
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatal(err)
		}
		for _, c := range ch.Choices {
			if texts[c.Index] == "" && c.Text != "" {
				if c.Text != prompt || c.Logprobs == nil {
					t.Errorf("choice %d: first text %q, want the prompt with its logprobs", c.Index, c.Text)
				} else {
					firsts[c.Index] = &c.Logprobs.TokenLogprobs
				}
			}
			texts[c.Index] += c.Text
		}
	}
	for i := range 2 {
		if lps := firsts[i]; lps == nil || len(*lps) != n || (*lps)[0] != nil || (*lps)[1] == nil {
			t.Errorf("choice %d: the prompt's logprobs streamed as %v", i, lps)
		}
		if want := prompt + tok.Decode(tok.Encode(answer)[:2]); texts[i] != want {
			t.Errorf("choice %d streamed %q, want %q", i, texts[i], want)
		}
	}
}

// A backend whose engine computes no prompt logprobs refuses echo with logprobs:
// the client hears a 400 naming echo, with the engine's reason.
func TestEchoRefusedByTheEngine(t *testing.T) {
	_, _, f := sdkSetup(t, func(b *fakeBackend) {
		b.err = connect.NewError(connect.CodeInvalidArgument,
			errors.New("engine: prompt logprobs not supported: the sim engine computes no distribution"))
	})
	r := do(t, f.HTTPHandler(), "POST", "/v1/completions", `{"prompt":"x","echo":true,"logprobs":0,"max_tokens":0}`)
	if msg, _, param, _ := errorShape(t, r.body); r.status != 400 || param == nil || *param != "echo" || !strings.Contains(msg, "sim engine") {
		t.Errorf("%d %s, want a 400 naming echo with the engine's reason", r.status, r.body)
	}
}

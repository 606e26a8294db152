package integration

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"testing"
)

// completionJSON is a /v1/completions answer with its nulls visible.
type completionJSON struct {
	Choices []struct {
		Index        int    `json:"index"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
		Logprobs     *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func postEcho(t *testing.T, url string, body any) completionJSON {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	_, _ = raw.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d: %s", b, resp.StatusCode, raw.String())
	}
	var out completionJSON
	if err := json.Unmarshal(raw.Bytes(), &out); err != nil {
		t.Fatalf("%v: %s", err, raw.String())
	}
	return out
}

// Prompt scoring as lm-eval-harness's loglikelihood does it, against stories260K
// on the native engine: a prompt sent as token ids with echo, logprobs and
// max_tokens 0 (and 1, the harness's own payload, whose last token it drops)
// gives every prompt token's logprob, the first null. At each position the
// distribution is the model's: the top 20 alternatives equal those of a
// generation from the prompt cut there, and the token's own logprob is its entry
// among them.
func TestEchoScoresPromptsAsEvalHarnesses(t *testing.T) {
	_, url := startUpWith(t, nil)
	ids := tokenize(t, url, "Once upon a time there was a little girl named Lily. She liked to play")
	if len(ids) < 12 {
		t.Fatalf("prompt of %d tokens", len(ids))
	}
	for _, maxTokens := range []int{0, 1} {
		out := postEcho(t, url, map[string]any{"model": "stories260K", "prompt": ids, "max_tokens": maxTokens, "temperature": 0,
			"logprobs": 20, "echo": true})
		c := out.Choices[0]
		lp := c.Logprobs
		if lp == nil || len(lp.TokenLogprobs) != len(ids)+maxTokens || lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
			t.Fatalf("max_tokens %d: logprobs %+v for %d prompt tokens, want as many (plus the generated), the first null", maxTokens, lp, len(ids))
		}
		if out.Usage.CompletionTokens != maxTokens || out.Usage.PromptTokens != len(ids) {
			t.Errorf("max_tokens %d: usage %+v", maxTokens, out.Usage)
		}
		if maxTokens == 0 && (c.FinishReason != "length" || c.Text != "Once upon a time there was a little girl named Lily. She liked to play") {
			t.Errorf("max_tokens 0: text %q finish %q, want the prompt and length", c.Text, c.FinishReason)
		}
		var sum float64
		for k := 1; k < len(ids); k++ {
			sum += *lp.TokenLogprobs[k]
		}
		if !(sum < 0) {
			t.Errorf("max_tokens %d: loglikelihood %g", maxTokens, sum)
		}
		if maxTokens == 1 {
			continue
		}
		for _, k := range []int{1, 5, len(ids) - 1} {
			gen := postEcho(t, url, map[string]any{"model": "stories260K", "prompt": ids[:k], "max_tokens": 1, "temperature": 0,
				"logprobs": 20})
			want := gen.Choices[0].Logprobs.TopLogprobs[0]
			got := lp.TopLogprobs[k]
			if len(got) != len(want) {
				t.Errorf("position %d: %d alternatives, a generation there %d", k, len(got), len(want))
			}
			for text, w := range want {
				if g, ok := got[text]; !ok || math.Abs(g-w) > 1e-3 {
					t.Errorf("position %d: %q scores %v, a generation there %g", k, text, got[text], w)
				}
			}
			if own, ok := got[lp.Tokens[k]]; ok && math.Abs(own-*lp.TokenLogprobs[k]) > 1e-6 {
				t.Errorf("position %d: token %q logprob %g, its alternative's %g", k, lp.Tokens[k], *lp.TokenLogprobs[k], own)
			}
		}
	}
}

func tokenize(t *testing.T, url, text string) []uint32 {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"prompt": text})
	resp, err := http.Post(url+"/tokenize", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("tokenize: status %d, %v", resp.StatusCode, err)
	}
	return out.Tokens
}

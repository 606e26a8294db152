package frontend

import (
	"encoding/json"
	"strings"
	"testing"
)

// An engine that streams its own text (token_texts) is answered with exactly that
// text, streamed or not: the ids beside it are guesses, so they are neither
// detokenized nor read as stop tokens, while stop strings still cut the text and
// logprobs name the engine's text.
func TestEngineTextIsTheAnswer(t *testing.T) {
	tok := testTokenizer(t)
	texts := []string{" The", " temperature", " here", "", "°", " is", " twent", "y", "-", "five", "▁", "."}
	// Guessed ids that would decode to other text, the model's EOS among them.
	ids := make([]uint32, len(texts))
	for i := range ids {
		ids[i] = tok.Encode("x")[0]
	}
	ids[3] = tok.EOS()
	want := strings.Join(texts, "")
	b := &fakeBackend{output: ids, texts: texts, perMsg: 2}
	f, _ := newTestFrontend(t, testConfig(), b)
	h := f.HTTPHandler()

	r := do(t, h, "POST", "/v1/completions", `{"prompt":"hi","logprobs":1}`)
	var whole completion
	if err := json.Unmarshal([]byte(r.body), &whole); err != nil || len(whole.Choices) != 1 {
		t.Fatalf("status %d body %s", r.status, r.body)
	}
	if got := whole.Choices[0].Text; got != want {
		t.Errorf("text %q, want the engine's %q", got, want)
	}
	if lp := whole.Choices[0].Logprobs; lp == nil || strings.Join(lp.Tokens, "") != want || len(lp.Tokens) != len(texts) {
		t.Errorf("logprobs tokens %+v, want the engine's texts %q", lp, texts)
	}
	if whole.Usage == nil || whole.Usage.CompletionTokens != len(texts) {
		t.Errorf("usage %+v, want %d completion tokens", whole.Usage, len(texts))
	}

	r = do(t, h, "POST", "/v1/completions", `{"prompt":"hi","stream":true}`)
	var streamed strings.Builder
	for _, ev := range sseEvents(t, r.body) {
		var c completion
		if ev != "[DONE]" && json.Unmarshal([]byte(ev), &c) == nil && len(c.Choices) == 1 {
			streamed.WriteString(c.Choices[0].Text)
		}
	}
	if streamed.String() != want {
		t.Errorf("streamed %q, want %q", streamed.String(), want)
	}

	r = do(t, h, "POST", "/v1/completions", `{"prompt":"hi","stop":["re°"]}`)
	if err := json.Unmarshal([]byte(r.body), &whole); err != nil || whole.Choices[0].Text != " The temperature he" {
		t.Errorf("with stop \"re°\": %s", r.body)
	}
}

// A backend whose texts do not match its ids one for one is an error, not a
// guess at which text goes with which token.
func TestEngineTextCountMismatch(t *testing.T) {
	b := &fakeBackend{output: []uint32{1, 2, 3}, texts: []string{"a", "b"}, perMsg: 3}
	f, _ := newTestFrontend(t, testConfig(), b)
	r := do(t, f.HTTPHandler(), "POST", "/v1/completions", `{"prompt":"hi"}`)
	if r.status != 502 || !strings.Contains(r.body, "2 token texts for 3 token ids") {
		t.Errorf("status %d body %s", r.status, r.body)
	}
}

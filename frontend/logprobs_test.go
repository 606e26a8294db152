package frontend

import (
	"encoding/json"
	"strings"
	"testing"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

func TestLogprobsAsOpenAIShapesThem(t *testing.T) {
	tok := testTokenizer(t)
	out := tok.Encode("Hello there, friend")
	b := &fakeBackend{output: out, perMsg: 2, path: decodev1.PrefillPath_PREFILL_PATH_LOCAL}
	f, _ := newTestFrontend(t, testConfig(), b)
	h := f.HTTPHandler()

	// Chat, whole: one entry per token, with its text, bytes and alternatives.
	r := do(t, h, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":2}`)
	var chat chatCompletion
	if err := json.Unmarshal([]byte(r.body), &chat); err != nil || r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if sp := b.lastReq().GetSampling(); !sp.GetLogprobs() || sp.GetTopLogprobs() != 2 {
		t.Errorf("sampling sent %v", sp)
	}
	lp := chat.Choices[0].Logprobs
	if lp == nil || len(lp.Content) != len(out) {
		t.Fatalf("logprobs %+v for %d tokens", lp, len(out))
	}
	var joined strings.Builder
	for k, e := range lp.Content {
		joined.WriteString(e.Token)
		if e.Logprob != -float32(k)/10 || len(e.TopLogprobs) != 2 || e.TopLogprobs[0].Token != e.Token || string(bytesOf(e.Bytes)) != e.Token {
			t.Errorf("entry %d: %+v", k, e)
		}
	}
	if joined.String() != *chat.Choices[0].Message.Content {
		t.Errorf("tokens join to %q, content is %q", joined.String(), *chat.Choices[0].Message.Content)
	}

	// Not asked: null, as before.
	r = do(t, h, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	if !strings.Contains(r.body, `"logprobs":null`) || b.lastReq().GetSampling().GetLogprobs() {
		t.Errorf("without logprobs: %s", r.body)
	}

	// Completions, streamed: parallel lists with offsets into the text.
	r = do(t, h, "POST", "/v1/completions", `{"prompt":"hi","logprobs":1,"stream":true}`)
	var tokens []string
	var offsets []int
	var text strings.Builder
	for line := range strings.SplitSeq(r.body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c completion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) == 0 {
			continue
		}
		text.WriteString(c.Choices[0].Text)
		if l := c.Choices[0].Logprobs; l != nil {
			tokens = append(tokens, l.Tokens...)
			offsets = append(offsets, l.TextOffset...)
			for i, top := range l.TopLogprobs {
				if len(top) != 1 || top[l.Tokens[i]] != *l.TokenLogprobs[i] {
					t.Errorf("top %v for %q %g", top, l.Tokens[i], *l.TokenLogprobs[i])
				}
			}
		}
	}
	if strings.Join(tokens, "") != text.String() || len(tokens) != len(out) {
		t.Errorf("streamed tokens %q, text %q", tokens, text.String())
	}
	for i := 1; i < len(offsets); i++ {
		if offsets[i] != offsets[i-1]+len(tokens[i-1]) {
			t.Errorf("text_offset %v for tokens %q", offsets, tokens)
			break
		}
	}

	for _, tc := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"top_logprobs":3}`, "top_logprobs"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21}`, "top_logprobs"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":3}`, "logprobs"},
		{"/v1/completions", `{"prompt":"hi","logprobs":-1}`, "logprobs"},
		{"/v1/completions", `{"prompt":"hi","logprobs":true}`, "logprobs"},
	} {
		r := do(t, h, "POST", tc.path, tc.body)
		if _, _, param, _ := errorShape(t, r.body); r.status != 400 || param == nil || *param != tc.param {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.body, r.status, r.body, tc.param)
		}
	}
}

func bytesOf(ints []int) []byte {
	b := make([]byte, len(ints))
	for i, v := range ints {
		b[i] = byte(v)
	}
	return b
}

package frontend

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/chattemplate"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/models"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/tokenizer"
)

// storiesModel serves the embedded model's own tokenizer with the fallback template.
func storiesModel(t *testing.T) *Model {
	t.Helper()
	f, err := gguf.Parse(models.Stories260K)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return &Model{ID: "stories260K", Fingerprint: "fp", ContextLength: 2048, Tokenizer: tok, Template: Jinja{T: chattemplate.Fallback()}}
}

func TestNoModelYet(t *testing.T) {
	f, err := New(testConfig(), nil, &fakeBackend{}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h := f.HTTPHandler()
	for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/tokenize"} {
		r := do(t, h, "POST", path, `{"prompt":"hi","messages":[{"role":"user","content":"hi"}]}`)
		if msg, _, _, _ := errorShape(t, r.body); r.status != http.StatusServiceUnavailable || !strings.Contains(msg, "no model") {
			t.Errorf("%s before a model: %d %s", path, r.status, r.body)
		}
	}
	if r := do(t, h, "GET", "/v1/models", ""); r.status != 200 || !strings.Contains(r.body, `"data":[]`) {
		t.Errorf("models before a model: %d %s", r.status, r.body)
	}
	if err := f.SetModel(storiesModel(t)); err != nil {
		t.Fatal(err)
	}
	if r := do(t, h, "GET", "/v1/models/stories260K", ""); r.status != 200 || !strings.Contains(r.body, `"max_model_len":2048`) {
		t.Errorf("model after SetModel: %d %s", r.status, r.body)
	}
	if err := f.SetModel(&Model{ID: "x"}); err == nil {
		t.Error("SetModel accepted a model with no tokenizer")
	}
}

// A completion's prompt gets the model's BOS; a BOS-only prompt's output starts the
// text, so SentencePiece's leading space is not part of it.
func TestModelTokenizerInPipeline(t *testing.T) {
	m := storiesModel(t)
	b := &fakeBackend{output: m.Tokenizer.Encode("Once upon a time"), path: decodev1.PrefillPath_PREFILL_PATH_LOCAL}
	f, err := New(testConfig(), m, b, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h := f.HTTPHandler()
	r := do(t, h, "POST", "/v1/completions", `{"prompt":"Once upon a time,"}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if got := b.reqs[0].GetPromptTokenIds(); !slices.Equal(got, []uint32{1, 403, 407, 261, 378, 432}) {
		t.Errorf("prompt ids %v, want BOS then the reference's 403 407 261 378 432", got)
	}
	if eos := b.reqs[0].GetStopTokenIds(); !slices.Contains(eos, 2) {
		t.Errorf("stop tokens %v lack EOS 2", eos)
	}
	r = do(t, h, "POST", "/v1/completions", `{"prompt":[1]}`)
	var c completion
	if err := json.Unmarshal([]byte(r.body), &c); err != nil || c.Choices[0].Text != "Once upon a time" {
		t.Errorf("BOS-only prompt: %s", r.body)
	}
	r = do(t, h, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	if r.status != 200 || !strings.Contains(r.body, "Once upon") {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	chat := b.reqs[len(b.reqs)-1].GetPromptTokenIds()
	if text := m.Tokenizer.Decode(chat); chat[0] != 1 || text != "User: Hi\nAssistant:" {
		t.Errorf("chat prompt %v = %q", chat, text)
	}
}

func TestTokenizeEndpoints(t *testing.T) {
	f, _ := newTestFrontend(t, testConfig(), &fakeBackend{})
	if err := f.SetModel(storiesModel(t)); err != nil {
		t.Fatal(err)
	}
	h := f.HTTPHandler()
	var tr tokenizeResponse
	r := do(t, h, "POST", "/tokenize", `{"model":"stories260K","prompt":"Once upon a time,","return_token_strs":true}`)
	if err := json.Unmarshal([]byte(r.body), &tr); err != nil || r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if !slices.Equal(tr.Tokens, []uint32{1, 403, 407, 261, 378, 432}) || tr.Count != 6 || tr.MaxModelLen != 2048 || tr.TokenStrs[1] != "▁Once" {
		t.Errorf("tokenize: %+v", tr)
	}
	r = do(t, h, "POST", "/tokenize", `{"prompt":"Once","add_special_tokens":false}`)
	if err := json.Unmarshal([]byte(r.body), &tr); err != nil || !slices.Equal(tr.Tokens, []uint32{403}) || tr.TokenStrs != nil {
		t.Errorf("without BOS: %s", r.body)
	}
	r = do(t, h, "POST", "/tokenize", `{"messages":[{"role":"user","content":"Hi"}]}`)
	if err := json.Unmarshal([]byte(r.body), &tr); err != nil || r.status != 200 || tr.Count == 0 {
		t.Errorf("messages: %d %s", r.status, r.body)
	}
	var dr detokenizeResponse
	r = do(t, h, "POST", "/detokenize", `{"tokens":[1,403,407,261,378,432]}`)
	if err := json.Unmarshal([]byte(r.body), &dr); err != nil || dr.Prompt != "Once upon a time," {
		t.Errorf("detokenize: %s", r.body)
	}
	for _, tc := range []struct{ path, body, param string }{
		{"/tokenize", `{"prompt":"x","model":"gpt-4"}`, "model"},
		{"/tokenize", `{}`, "prompt"},
		{"/tokenize", `{"prompt":"x","messages":[]}`, "messages"},
		{"/detokenize", `{"tokens":[512]}`, "tokens"},
		{"/detokenize", `{"tokens":"abc"}`, "tokens"},
		{"/detokenize", `{}`, "tokens"},
	} {
		r := do(t, h, "POST", tc.path, tc.body)
		if _, _, param, _ := errorShape(t, r.body); r.status/100 != 4 || param == nil || *param != tc.param {
			t.Errorf("%s %s: %d %s, want a 4xx naming %s", tc.path, tc.body, r.status, r.body, tc.param)
		}
	}
}

func TestUnsupportedFieldsAreRefused(t *testing.T) {
	f, _ := newTestFrontend(t, testConfig(), &fakeBackend{output: []uint32{1}})
	h := f.HTTPHandler()
	chat := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ path, extra, param string }{
		{"/v1/completions", `"tools":[{"type":"function","function":{"name":"f"}}]`, "tools"},
		{"/v1/chat/completions", `"functions":[{"name":"f"}]`, "functions"},
		{"/v1/chat/completions", `"response_format":{"type":"xml"}`, "response_format"},
		{"/v1/chat/completions", `"response_format":{"type":"json_schema"}`, "response_format"},
		{"/v1/completions", `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"a"}}}`, "response_format"},
		{"/v1/chat/completions", `"logit_bias":{"999999":-100}`, "logit_bias"},
		{"/v1/chat/completions", `"logit_bias":{"x":1}`, "logit_bias"},
		{"/v1/chat/completions", `"logit_bias":{"5":101}`, "logit_bias"},
		{"/v1/chat/completions", `"presence_penalty":2.5`, "presence_penalty"},
		{"/v1/chat/completions", `"frequency_penalty":"x"`, "frequency_penalty"},
		{"/v1/chat/completions", `"repetition_penalty":0`, "repetition_penalty"},
		{"/v1/completions", `"min_p":1.5`, "min_p"},
		{"/v1/completions", `"stop_token_ids":[999999]`, "stop_token_ids"},
		{"/v1/completions", `"top_k":-2`, "top_k"},
		{"/v1/chat/completions", `"top_k":1.5`, "top_k"},
		{"/v1/chat/completions", `"n":17`, "n"},
		{"/v1/chat/completions", `"echo":true`, "echo"},
		{"/v1/chat/completions", `"best_of":3`, "best_of"},
		{"/v1/completions", `"best_of":0`, "best_of"},
		{"/v1/completions", `"best_of":17,"temperature":1`, "best_of"},
		{"/v1/completions", `"best_of":1,"n":2`, "best_of"},
		{"/v1/completions", `"best_of":3,"temperature":1,"stream":true`, "best_of"},
		{"/v1/completions", `"best_of":3,"temperature":0`, "best_of"},
		{"/v1/completions", `"best_of":"3"`, "best_of"},
		{"/v1/completions", `"best_of":8,"prompt":["a","b","c","d","e","f","g","h","i"],"temperature":1`, "best_of"},
		{"/v1/completions", `"max_tokens":0`, "max_tokens"},
		{"/v1/completions", `"echo":"yes"`, "echo"},
		{"/v1/completions", `"suffix":"end"`, "suffix"},
	} {
		body := "{" + chat + "," + tc.extra + "}"
		if tc.path == "/v1/completions" {
			body = `{"prompt":"hi",` + tc.extra + "}"
		}
		r := do(t, h, "POST", tc.path, body)
		if _, _, param, _ := errorShape(t, r.body); r.status != 400 || param == nil || *param != tc.param {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.extra, r.status, r.body, tc.param)
		}
	}
	// Their defaults are accepted.
	for _, extra := range []string{`"tools":null`, `"tool_choice":"none"`, `"response_format":{"type":"text"}`,
		`"presence_penalty":0`, `"logit_bias":{}`, `"top_k":-1`, `"top_k":0`, `"best_of":1`} {
		if r := do(t, h, "POST", "/v1/chat/completions", "{"+chat+","+extra+"}"); r.status != 200 {
			t.Errorf("%s: %d %s", extra, r.status, r.body)
		}
	}
}

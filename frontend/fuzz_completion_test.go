package frontend

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// FuzzCompletionRequest throws arbitrary bodies at /v1/completions, seeded with the
// shapes its prompt field takes (a string, token ids, a batch of either). Whatever
// the body, the answer is never a 5xx, and an error is an OpenAI error object that
// was given without calling the backend. A 200 called the backend exactly once,
// with a prompt that is non-empty, inside the vocabulary, and leaves room for
// max_tokens inside the context, and is a well-formed text_completion, whole or as
// server-sent events ending in [DONE] with exactly one finish reason.
//
//	go test ./frontend -run '^$' -fuzz FuzzCompletionRequest -fuzztime 60s
func FuzzCompletionRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"tandem-test","prompt":"Once upon a time"}`,
		`{"prompt":"hi","stream":true,"stream_options":{"include_usage":true},"max_tokens":2}`,
		`{"prompt":[9906,1917],"max_tokens":1,"temperature":0.5,"top_p":0.9,"seed":7}`,
		`{"prompt":[[9906,1917]],"stop":"o"}`,
		`{"prompt":["one"],"stop":["a","b",""]}`,
		`{"prompt":["one","two"]}`,
		`{"prompt":[[1],[2]]}`,
		`{"prompt":[100277]}`,
		`{"prompt":[-1]}`,
		`{"prompt":[4294967296]}`,
		`{"prompt":[]}`,
		`{"prompt":[[]]}`,
		`{"prompt":""}`,
		`{"prompt":null}`,
		`{"prompt":{"text":"x"}}`,
		`{"prompt":[null]}`,
		`{"prompt":[true]}`,
		`{"prompt":"x","max_tokens":0}`,
		`{"prompt":"x","max_tokens":512}`,
		`{"prompt":"x","max_tokens":-3,"max_completion_tokens":4}`,
		`{"prompt":"x","n":2}`,
		`{"prompt":"x","temperature":2.5}`,
		`{"prompt":"x","top_p":0}`,
		`{"prompt":"x","model":"gpt-4"}`,
		`{"prompt":"x","stream":"yes"}`,
		`{"prompt":"x","unknown_field":{"nested":[1,2]}}`,
		`{"prompt":"\u00e9\ud83d\ude00","echo":true,"logprobs":3,"suffix":"z"}`,
		`{"prompt":"x"} trailing`,
		`{"prompt":"x","echo":true,"max_tokens":0,"logprobs":1}`,
		`{"prompt":[[1,2],[3]],"echo":true,"n":2,"stream":true,"logprobs":0}`,
		`{"prompt":"x","best_of":3,"n":2,"temperature":1,"logprobs":2}`,
		`{"prompt":["a","b"],"best_of":2,"temperature":0.5}`,
		`{"prompt":"x","top_k":5}`,
	} {
		f.Add(seed)
	}
	tok := testTokenizer(f)
	cfg := testConfig()
	b := &fakeBackend{output: tok.Encode(answer), perMsg: 3, path: decodev1.PrefillPath_PREFILL_PATH_LOCAL}
	fe, _ := newTestFrontend(f, cfg, b)
	h := fe.HTTPHandler()
	f.Fuzz(func(t *testing.T, body string) {
		// The fake backend records every request; keep only this input's.
		b.mu.Lock()
		b.reqs = b.reqs[:0]
		b.mu.Unlock()

		req := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b.mu.Lock()
		reqs := append([]*decodev1.GenerateRequest(nil), b.reqs...)
		b.mu.Unlock()

		if rec.Code >= 500 {
			t.Fatalf("answered %d to %q: %s", rec.Code, body, rec.Body.String())
		}
		if rec.Code != http.StatusOK {
			var e openAIError
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("%d with a body that is not an OpenAI error: %s", rec.Code, rec.Body.String())
			}
			if len(reqs) != 0 {
				t.Fatalf("rejected with %d (%s) after reaching the backend", rec.Code, e.Error.Message)
			}
			return
		}

		// One backend request per choice (n, or a batch of prompts).
		if len(reqs) == 0 {
			t.Fatalf("200 after no backend request")
		}
		promptLen := 0
		for _, g := range reqs {
			ids := g.GetPromptTokenIds()
			if len(ids) == 0 {
				t.Fatalf("empty prompt sent to the backend for %q", body)
			}
			for i, id := range ids {
				if int(id) >= tok.VocabSize() {
					t.Fatalf("prompt token %d at %d is outside the vocabulary of %d", id, i, tok.VocabSize())
				}
			}
			if mt := int(g.GetMaxTokens()); mt < 1 || len(ids)+mt > testContextLength {
				t.Fatalf("backend asked for %d tokens after a %d-token prompt; context is %d", mt, len(ids), testContextLength)
			}
			promptLen = len(ids)
		}

		var stream struct {
			Stream bool   `json:"stream"`
			N      *int64 `json:"n"`
			BestOf *int64 `json:"best_of"`
		}
		_ = json.Unmarshal([]byte(body), &stream) // it decoded once already: the handler said 200
		if !stream.Stream {
			var c completion
			if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
				t.Fatalf("200 body is not a completion: %v: %s", err, rec.Body.String())
			}
			// best_of generates best_of candidates per prompt and returns n of them.
			want := len(reqs)
			if n, bo := max(derefOr(stream.N, 1), 1), derefOr(stream.BestOf, 0); bo > n {
				want = len(reqs) / int(bo) * int(n)
			}
			if len(reqs) == 1 {
				checkCompletion(t, c, promptLen)
			} else if len(c.Choices) != want {
				t.Fatalf("%d choices for %d backend requests, want %d", len(c.Choices), len(reqs), want)
			}
			return
		}
		if ct := rec.Header().Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("streamed with Content-Type %q", ct)
		}
		ev := sseEvents(t, rec.Body.String())
		if len(ev) < 3 || ev[len(ev)-1] != "[DONE]" {
			t.Fatalf("events %q: want a first chunk, a finish and [DONE]", ev)
		}
		finishes := 0
		for _, e := range ev[:len(ev)-1] {
			var c completion
			if err := json.Unmarshal([]byte(e), &c); err != nil || c.Object != "text_completion" {
				t.Fatalf("event %q is not a text_completion chunk (%v)", e, err)
			}
			for _, ch := range c.Choices {
				if ch.FinishReason != nil {
					finishes++
				}
			}
		}
		if finishes != len(reqs) {
			t.Fatalf("%d chunks carry a finish reason, want %d: %q", finishes, len(reqs), ev)
		}
	})
}

func derefOr(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

func checkCompletion(t *testing.T, c completion, promptLen int) {
	t.Helper()
	if c.Object != "text_completion" || !strings.HasPrefix(c.ID, "cmpl-") || len(c.Choices) != 1 {
		t.Fatalf("completion %+v: want one choice, object text_completion", c)
	}
	if fr := c.Choices[0].FinishReason; fr == nil || (*fr != "stop" && *fr != "length") {
		t.Fatalf("finish reason %v", fr)
	}
	if c.Usage == nil || c.Usage.PromptTokens != promptLen || c.Usage.TotalTokens != c.Usage.PromptTokens+c.Usage.CompletionTokens {
		t.Fatalf("usage %+v for a %d-token prompt", c.Usage, promptLen)
	}
}

package frontend

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// FuzzChatRequest throws arbitrary bodies at the OpenAI decoder and handlers with a
// healthy backend: whatever the body, the answer is never a 5xx, and an error is
// always an OpenAI error object.
//
//	go test ./frontend -run '^$' -fuzz FuzzChatRequest -fuzztime 30s
func FuzzChatRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"tandem-test","messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"日本"}]}],"stream":true,` +
			`"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":"x"}],"stop":["a","b"],"max_tokens":3,"temperature":0,"top_p":1,"seed":-5,"n":1,"user":"u"}`,
		`{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":1e30}`,
		`{"prompt":[1,2,3],"stop":"o"}`,
		`{"messages":[{"role":"assistant","content":null}],"stop":null}`,
		`{"messages":[]}`,
		`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",` +
			`"function":{"name":"f","arguments":"{\"a\":[1]}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],` +
			`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"array"}}}}}],` +
			`"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false,"stream":true}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`,
		`[]`,
		`{"messages":[{"role":"user","content":"\ud800"}]}`,
		"\xff",
		``,
	} {
		f.Add(seed)
	}
	tok := testTokenizer(f)
	b := &fakeBackend{output: tok.Encode(answer), perMsg: 3, path: decodev1.PrefillPath_PREFILL_PATH_LOCAL}
	fe, _ := newTestFrontend(f, testConfig(), b)
	h := fe.HTTPHandler()
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s answered %d to %q: %s", path, rec.Code, body, rec.Body.String())
			}
			if rec.Code != http.StatusOK {
				var e openAIError
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
					t.Fatalf("%s: %d with a body that is not an OpenAI error: %s", path, rec.Code, rec.Body.String())
				}
			}
		}
	})
}

package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tandem-serve/tandem/internal/requestid"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

type rawResult struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, h http.Handler, method, path, body string, header ...string) rawResult {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rawResult{rec.Code, rec.Header(), rec.Body.String()}
}

// errorShape decodes an error body strictly: exactly the four OpenAI keys.
func errorShape(t *testing.T, body string) (msg, typ string, param, code *string) {
	t.Helper()
	var outer map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &outer); err != nil || len(outer) != 1 || outer["error"] == nil {
		t.Fatalf("error body %s is not {\"error\": {...}}", body)
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(outer["error"], &inner); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := inner[k]; !ok {
			t.Errorf("error body %s lacks %q", body, k)
		}
	}
	var e struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	if err := json.Unmarshal(outer["error"], &e); err != nil {
		t.Fatal(err)
	}
	return e.Message, e.Type, e.Param, e.Code
}

func newRawSetup(t *testing.T) (http.Handler, *fakeBackend, *Frontend) {
	tok := testTokenizer(t)
	b := &fakeBackend{output: tok.Encode(answer), perMsg: 2, path: decodev1.PrefillPath_PREFILL_PATH_LOCAL}
	f, _ := newTestFrontend(t, testConfig(), b)
	return f.HTTPHandler(), b, f
}

func TestHTTPBadRequests(t *testing.T) {
	h, _, _ := newRawSetup(t)
	for _, tc := range []struct {
		name, path, body string
		status           int
		param            string // "" means null
		inMessage        string
	}{
		{"invalid json", "/v1/chat/completions", `{"model":`, 400, "", "not valid JSON"},
		{"not an object", "/v1/chat/completions", `[1,2]`, 400, "", "JSON object"},
		{"invalid utf-8", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, "", "UTF-8"},
		{"wrong type", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, 400, "temperature", "temperature"},
		{"unknown role", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"},{"role":"wizard","content":"b"}]}`, 400,
			"messages[1].role", "wizard"},
		{"image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400,
			"messages[0].content[0].type", "image_url"},
		{"bad stop", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"stop":5}`, 400, "stop", "stop"},
		{"negative max", "/v1/completions", `{"prompt":"a","max_tokens":-3}`, 400, "max_tokens", "at least 1"},
		{"no prompt", "/v1/completions", `{"model":"tandem-test"}`, 400, "prompt", "required"},
		{"65 prompts", "/v1/completions", `{"prompt":[` + strings.Repeat(`"a",`, 64) + `"b"]}`, 400, "prompt", "65 prompts"},
		{"token out of vocab", "/v1/completions", `{"prompt":[1,2,999999]}`, 400, "prompt", "vocabulary"},
		{"n=17", "/v1/completions", `{"prompt":"a","n":17}`, 400, "n", "n=17"},
	} {
		r := do(t, h, "POST", tc.path, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, r.status, tc.status, r.body)
			continue
		}
		msg, typ, param, _ := errorShape(t, r.body)
		gotParam := ""
		if param != nil {
			gotParam = *param
		}
		if gotParam != tc.param || typ != "invalid_request_error" || !strings.Contains(msg, tc.inMessage) {
			t.Errorf("%s: param %q type %q message %q; want param %q and %q in the message", tc.name, gotParam, typ, msg, tc.param, tc.inMessage)
		}
	}
}

func TestHTTPPromptLongerThanContext(t *testing.T) {
	h, b, _ := newRawSetup(t)
	prompt := strings.Repeat("word ", 600)
	n := len(testTokenizer(t).Encode(prompt))
	r := do(t, h, "POST", "/v1/completions", `{"prompt":"`+prompt+`"}`)
	msg, _, param, _ := errorShape(t, r.body)
	if r.status != 400 || param == nil || *param != "prompt" || !strings.Contains(msg, itoaT(n)) || !strings.Contains(msg, "512") {
		t.Errorf("status %d param %v message %q; want 400 naming %d and 512", r.status, param, msg, n)
	}
	if b.lastReq() != nil {
		t.Error("an over-long prompt reached the backend")
	}

	// A prompt that fits leaves less than the default budget: max_tokens is capped.
	prompt = strings.Repeat("word ", 500)
	n = len(testTokenizer(t).Encode(prompt))
	r = do(t, h, "POST", "/v1/completions", `{"prompt":"`+prompt+`"}`)
	if r.status != 200 || int(b.lastReq().GetMaxTokens()) != 512-n {
		t.Errorf("status %d, backend max_tokens %d, want %d", r.status, b.lastReq().GetMaxTokens(), 512-n)
	}
	// An explicit max_tokens that does not fit beside the prompt is refused, naming
	// the counts; one that just fits is passed on as asked.
	r = do(t, h, "POST", "/v1/completions", `{"prompt":"`+prompt+`","max_tokens":`+itoaT(512-n+1)+`}`)
	msg, _, param, code := errorShape(t, r.body)
	if r.status != 400 || param == nil || *param != "max_tokens" || code == nil || *code != "context_length_exceeded" ||
		!strings.Contains(msg, "513") || !strings.Contains(msg, itoaT(n)+" in the prompt") {
		t.Errorf("max_tokens past the context: status %d param %v code %v message %q; want 400 on max_tokens naming 513 = %d + %d",
			r.status, param, code, msg, n, 512-n+1)
	}
	r = do(t, h, "POST", "/v1/completions", `{"prompt":"`+prompt+`","max_tokens":`+itoaT(512-n)+`}`)
	if r.status != 200 || int(b.lastReq().GetMaxTokens()) != 512-n {
		t.Errorf("max_tokens that just fits: status %d, backend max_tokens %d, want 200 and %d", r.status, b.lastReq().GetMaxTokens(), 512-n)
	}
}

func itoaT(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestHTTPMethodsAndPaths(t *testing.T) {
	h, _, _ := newRawSetup(t)
	r := do(t, h, "GET", "/v1/chat/completions", "")
	if r.status != 405 || r.header.Get("Allow") != "POST" {
		t.Errorf("GET chat: %d Allow %q", r.status, r.header.Get("Allow"))
	}
	errorShape(t, r.body)
	if r := do(t, h, "POST", "/v1/models", ""); r.status != 405 {
		t.Errorf("POST models: %d", r.status)
	}
	r = do(t, h, "GET", "/v1/embeddings", "")
	if r.status != 404 {
		t.Errorf("unknown path: %d", r.status)
	}
	errorShape(t, r.body)
	if r := do(t, h, "GET", "/healthz", ""); r.status != 200 || !strings.Contains(r.body, `"ok"`) {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
	if r := do(t, h, "GET", "/readyz", ""); r.status != 200 || !strings.Contains(r.body, `"model":"tandem-test"`) {
		t.Errorf("readyz: %d %s", r.status, r.body)
	}
	r = do(t, h, "GET", "/v1/models", "")
	var list modelList
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || list.Object != "list" || len(list.Data) != 1 ||
		list.Data[0].ID != "tandem-test" || list.Data[0].MaxModelLen != 512 {
		t.Errorf("models: %s", r.body)
	}
}

func TestHTTPRequestID(t *testing.T) {
	h, b, _ := newRawSetup(t)
	r := do(t, h, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, "X-Request-Id", "client-abc-1")
	if r.header.Get(requestid.Header) != "client-abc-1" || b.lastReq().GetRequestId() != "client-abc-1" ||
		!strings.Contains(r.body, `"id":"chatcmpl-client-abc-1"`) {
		t.Errorf("given id not carried: header %q backend %q body %s", r.header.Get(requestid.Header), b.lastReq().GetRequestId(), r.body)
	}
	r = do(t, h, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	id := r.header.Get(requestid.Header)
	if len(id) != 32 || b.lastReq().GetRequestId() != id {
		t.Errorf("generated id %q, backend got %q", id, b.lastReq().GetRequestId())
	}
	// A header that could break logs or other headers is replaced, not echoed.
	r = do(t, h, "GET", "/healthz", "", "X-Request-Id", "bad id\twith spaces")
	if got := r.header.Get(requestid.Header); got == "" || strings.ContainsAny(got, " \t") {
		t.Errorf("unsafe id echoed: %q", got)
	}
}

func TestHTTPContentParts(t *testing.T) {
	h, b, _ := newRawSetup(t)
	r := do(t, h, "POST", "/v1/chat/completions",
		`{"model":"tandem-test","messages":[{"role":"developer","content":[{"type":"text","text":"Be "},{"type":"text","text":"kind."}]},`+
			`{"role":"user","content":"hi"},{"role":"assistant","content":null}],"user":"u1","future_field":{"x":1}}`)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	want, _ := ChatML{}.Apply([]Message{{Role: "system", Content: "Be kind."}, {Role: "user", Content: "hi"}, {Role: "assistant", Content: ""}})
	if got := testTokenizer(t).Decode(b.lastReq().GetPromptTokenIds()); got != want {
		t.Errorf("prompt = %q, want %q", got, want)
	}
}

// sseEvents reads a stream body into its data payloads, checking the framing.
func sseEvents(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	expectBlank := false
	for sc.Scan() {
		line := sc.Text()
		if expectBlank {
			if line != "" {
				t.Fatalf("event not followed by a blank line: %q", line)
			}
			expectBlank = false
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("unexpected SSE line %q", line)
		}
		out = append(out, data)
		expectBlank = true
	}
	return out
}

func TestHTTPStreamFraming(t *testing.T) {
	h, b, _ := newRawSetup(t)
	b.path = decodev1.PrefillPath_PREFILL_PATH_REMOTE
	r := do(t, h, "POST", "/v1/completions", `{"prompt":"hi","stream":true,"stream_options":{"include_usage":true}}`)
	if r.status != 200 || r.header.Get("Content-Type") != "text/event-stream" || r.header.Get(HeaderPrefillPath) != "remote" {
		t.Fatalf("status %d headers %v", r.status, r.header)
	}
	ev := sseEvents(t, r.body)
	if ev[len(ev)-1] != "[DONE]" {
		t.Errorf("last event %q", ev[len(ev)-1])
	}
	var first, usageChunk completion
	_ = json.Unmarshal([]byte(ev[0]), &first)
	_ = json.Unmarshal([]byte(ev[len(ev)-2]), &usageChunk)
	if first.Tandem == nil || first.Tandem.Path != "remote" || first.Object != "text_completion" {
		t.Errorf("first chunk %s", ev[0])
	}
	if len(usageChunk.Choices) != 0 || usageChunk.Usage == nil || usageChunk.Usage.PromptTokens != 1 {
		t.Errorf("usage chunk %s", ev[len(ev)-2])
	}
	// Without include_usage there is no usage chunk.
	r = do(t, h, "POST", "/v1/completions", `{"prompt":"hi","stream":true}`)
	if strings.Contains(r.body, `"usage"`) {
		t.Errorf("usage sent without include_usage: %s", r.body)
	}
}

func TestHTTPStreamErrorEvent(t *testing.T) {
	h, b, _ := newRawSetup(t)
	b.recvErr, b.failAfter = io.ErrUnexpectedEOF, 2
	r := do(t, h, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`)
	ev := sseEvents(t, r.body)
	if len(ev) < 3 || ev[len(ev)-1] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	_, typ, _, _ := errorShape(t, ev[len(ev)-2])
	if typ != "server_error" {
		t.Errorf("error event type %q", typ)
	}
}

// metricValue returns the counter value, or the histogram's sample count, of the
// series of name whose labels include want.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(want); i += 2 {
				if labels[want[i]] != want[i+1] {
					continue series
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	if h := m.GetHistogram(); h != nil {
		return float64(h.GetSampleCount())
	}
	return m.GetCounter().GetValue()
}

type panicBackend struct{}

func (panicBackend) Generate(context.Context, *decodev1.GenerateRequest) (TokenStream, *routerv1.RouteResponse, error) {
	panic("decode client bug")
}

func TestHTTPPanicIsA500(t *testing.T) {
	f, _ := newTestFrontend(t, testConfig(), panicBackend{})
	r := do(t, f.HTTPHandler(), "POST", "/v1/completions", `{"prompt":"hi"}`)
	msg, typ, _, _ := errorShape(t, r.body)
	if r.status != 500 || typ != "server_error" || strings.Contains(msg, "decode client bug") {
		t.Errorf("status %d type %q message %q; want 500 without the panic text", r.status, typ, msg)
	}
}

func TestHTTPMetrics(t *testing.T) {
	tok := testTokenizer(t)
	b := &fakeBackend{output: tok.Encode("ok"), path: decodev1.PrefillPath_PREFILL_PATH_FALLBACK}
	f, reg := newTestFrontend(t, testConfig(), b)
	h := f.HTTPHandler()
	do(t, h, "POST", "/v1/completions", `{"prompt":"hi"}`)
	do(t, h, "POST", "/v1/completions", `{"prompt":"hi","temperature":9}`)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"tandem_frontend_requests_total", []string{"endpoint", "completions", "code", "200"}, 1},
		{"tandem_frontend_requests_total", []string{"endpoint", "completions", "code", "400"}, 1},
		{"tandem_frontend_prefill_path_total", []string{"path", "fallback"}, 1},
		{"tandem_frontend_prompt_tokens_total", nil, 1},
		{"tandem_frontend_generation_tokens_total", nil, float64(len(tok.Encode("ok")))},
		{"tandem_frontend_time_to_first_token_seconds", []string{"endpoint", "completions"}, 1},
		{"tandem_frontend_e2e_request_latency_seconds", []string{"endpoint", "completions"}, 1},
	} {
		if got := metricValue(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// /readyz answers 503 with the reason, in OpenAI's error shape, until a model
// is loaded and while the router does not serve; /healthz answers 200 all along.
func TestHTTPReadiness(t *testing.T) {
	f, err := New(testConfig(), nil, &fakeBackend{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := f.HTTPHandler()
	want := func(name string, status int, body string) {
		t.Helper()
		r := do(t, h, "GET", "/readyz", "")
		if r.status != status || !strings.Contains(r.body, body) {
			t.Errorf("%s: readyz %d %s, want %d with %q", name, r.status, r.body, status, body)
		}
		if status == 503 {
			errorShape(t, r.body)
		}
		if r := do(t, h, "GET", "/healthz", ""); r.status != 200 {
			t.Errorf("%s: healthz %d", name, r.status)
		}
	}
	want("no model", 503, "no model is loaded yet")
	if err := f.SetModel(testModel(testTokenizer(t))); err != nil {
		t.Fatal(err)
	}
	want("model loaded", 200, `"status":"ready"`)
	f.SetBackendServing(false)
	want("router down", 503, "the router is not serving")
	f.SetBackendServing(true)
	want("router back", 200, `"status":"ready"`)
}

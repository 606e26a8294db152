package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The page and its files are served from the binary with a strict content
// security policy; anything else goes to the API beside them.
func TestPageAndFiles(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := New(Options{}).Handler(api)
	for _, tc := range []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/", 200, "text/html"},
		{"HEAD", "/", 200, "text/html"},
		{"GET", "/console/console.js", 200, "text/javascript"},
		{"GET", "/console/common.js", 200, "text/javascript"},
		{"GET", "/console/chat.js", 200, "text/javascript"},
		{"GET", "/console/planner.js", 200, "text/javascript"},
		{"GET", "/console/console.css", 200, "text/css"},
		{"GET", "/console/favicon.svg", 200, "image/svg+xml"},
		{"GET", "/console/nothing.js", 404, ""},
		{"GET", "/console/..%2f..%2fgo.mod", 404, ""},
		{"GET", "/v1/models", http.StatusTeapot, ""},
		{"POST", "/", http.StatusTeapot, ""},
		{"GET", "/index.html", http.StatusTeapot, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.status || !strings.HasPrefix(rec.Header().Get("Content-Type"), tc.ctype) {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, rec.Code, rec.Header().Get("Content-Type"), tc.status, tc.ctype)
		}
		if tc.path == "/" && tc.status == 200 {
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
				t.Errorf("the page's CSP %q", csp)
			}
			if tc.method == "GET" && !strings.Contains(rec.Body.String(), `src="/console/console.js"`) {
				t.Errorf("the page does not load its script")
			}
		}
	}
}

// fakePolicy records what the console writes, and answers as told.
type fakePolicy struct {
	checkErr, setErr error
	target, value    string
}

func (p *fakePolicy) Check(target string, value []byte) error { return p.checkErr }

func (p *fakePolicy) Set(_ context.Context, target string, value []byte) error {
	p.target, p.value = target, string(value)
	return p.setErr
}

// The policy form's endpoint passes what it is sent through the store's check
// (tandem config set's), and says what was wrong in a way the page can show.
func TestPolicyEndpoint(t *testing.T) {
	post := func(h http.Handler, body string, header ...string) (int, string) {
		req := httptest.NewRequest("POST", "/console/policy", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	api := http.NotFoundHandler()
	good := `{"target":"decode","value":{"short_prefill_threshold":256}}`

	if code, body := post(New(Options{}).Handler(api), good); code != http.StatusConflict || !strings.Contains(body, "--consul") {
		t.Errorf("without a store: %d %s; want 409 saying Consul is needed", code, body)
	}

	store := &fakePolicy{}
	h := New(Options{Policy: store}).Handler(api)
	if code, body := post(h, good); code != 200 || store.target != "decode" || store.value != `{"short_prefill_threshold":256}` ||
		!strings.Contains(body, `"target":"decode"`) {
		t.Errorf("a good policy: %d %s; stored %s %s", code, body, store.target, store.value)
	}
	for _, bad := range []string{`not json`, `{"target":"decode","valeu":{}}`, `{"target":"decode","value":{}} trailing`} {
		if code, body := post(h, bad); code != http.StatusBadRequest || !strings.Contains(body, `"message"`) {
			t.Errorf("%s: %d %s; want 400 with a message", bad, code, body)
		}
	}
	store.checkErr = errors.New("config set tandem/config/decode: policy \"sometimes\": want one of [threshold cost always-local always-remote]")
	if code, body := post(h, good); code != http.StatusBadRequest || !strings.Contains(body, "sometimes") {
		t.Errorf("a policy the check refuses: %d %s; want 400 with the check's words", code, body)
	}
	store.checkErr, store.setErr = nil, errors.New("consul: connection refused")
	if code, body := post(h, good); code != http.StatusBadGateway || !strings.Contains(body, "connection refused") {
		t.Errorf("Consul down: %d %s; want 502", code, body)
	}
	store.setErr = nil

	// Another site cannot post it from a browser that has the page open.
	if code, _ := post(h, good, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("a cross-site post: %d, want 403", code)
	}
	// The guard (the API keys) stands before it, as before the events.
	guarded := New(Options{Policy: store, Guard: func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	}}).Handler(api)
	if code, _ := post(guarded, good); code != http.StatusUnauthorized {
		t.Errorf("a guarded policy post: %d, want 401", code)
	}
	rec := httptest.NewRecorder()
	guarded.ServeHTTP(rec, httptest.NewRequest("GET", "/console/events", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("guarded events: %d, want 401", rec.Code)
	}
}

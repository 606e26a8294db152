package frontend

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// flushRecorder records what had been written at each flush: what a client
// receives in each write.
type flushRecorder struct {
	*httptest.ResponseRecorder
	flushes []string
}

func (r *flushRecorder) Flush() {
	r.flushes = append(r.flushes, r.Body.String())
	r.ResponseRecorder.Flush()
}

// The opening event of a stream (the role, the tandem object) goes out in the
// same write as the first token, which start has already waited for: a write of
// its own cost a syscall and a client wake-up on the way to the first token.
func TestStreamOpensWithTheFirstToken(t *testing.T) {
	tok := testTokenizer(t)
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"hi","stream":true,"max_tokens":3}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":3}`},
	} {
		f, _ := newTestFrontend(t, testConfig(), &fakeBackend{output: tok.Encode("Hello there, world")})
		rec := &flushRecorder{ResponseRecorder: httptest.NewRecorder()}
		f.HTTPHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body)))
		if rec.Code != http.StatusOK || len(rec.flushes) == 0 {
			t.Fatalf("%s: status %d, %d flushes: %s", c.path, rec.Code, len(rec.flushes), rec.Body)
		}
		first := rec.flushes[0]
		if n := strings.Count(first, "data: "); n != 2 || !strings.Contains(first, `"tandem"`) || !strings.Contains(first, "Hello") {
			t.Errorf("%s: the first write has %d events, want the opening one and the first token's:\n%s", c.path, n, first)
		}
	}
}

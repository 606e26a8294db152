package openaihttp_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/engine/openaihttp"
)

func lines(t *testing.T, path string) []openaihttp.Exchange {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []openaihttp.Exchange
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var x openaihttp.Exchange
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		out = append(out, x)
	}
	return out
}

// Each line carries the format's version; credentials are never written; a body
// the client closed early, a failed request and a ZMQ message are each one line.
func TestRecorderFormat(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {}\n\n"))
	}))
	defer srv.Close()
	rec, err := openaihttp.NewRecorder(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: rec}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions?x=1", strings.NewReader(`{"prompt": [1, 2]}`))
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("X-Request-Id", "r1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // unread
	if _, err := hc.Get("http://127.0.0.1:1/health"); err == nil {
		t.Fatal("port 1 answered")
	}
	rec.OnFrames(true, [][]byte{[]byte("kv"), {0, 0, 0, 0, 0, 0, 0, 1}, {0x93}})
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(rec.Path())
	if strings.Contains(string(raw), "secret") {
		t.Errorf("the capture holds the credential:\n%s", raw)
	}
	xs := lines(t, rec.Path())
	if len(xs) != 3 {
		t.Fatalf("%d lines:\n%s", len(xs), raw)
	}
	for _, x := range xs {
		if x.V != openaihttp.RecordVersion {
			t.Errorf("version %d", x.V)
		}
	}
	h := xs[0].HTTP
	if h == nil || h.Path != "/v1/completions?x=1" || string(h.Body) != `{"prompt":[1,2]}` || h.Header["X-Request-Id"] != "r1" ||
		h.Status != 200 || h.Error != "closed" {
		t.Errorf("the closed stream: %+v", h)
	}
	if h := xs[1].HTTP; h == nil || h.Status != 0 || h.Error == "" {
		t.Errorf("the failed request: %+v", h)
	}
	if z := xs[2].ZMQ; z == nil || !z.Replay || len(z.Frames) != 3 || string(z.Frames[0]) != "kv" {
		t.Errorf("the ZMQ message: %+v", z)
	}
}

package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// endlessBackend streams a few tokens and then waits, like a slow decode worker with
// a huge budget, until its context ends; closed is signalled when the frontend
// closes the stream. Only a cancelled request can end it.
type endlessBackend struct {
	token  uint32
	closed chan struct{}
	once   sync.Once
}

func (b *endlessBackend) Generate(ctx context.Context, _ *decodev1.GenerateRequest) (TokenStream, *routerv1.RouteResponse, error) {
	return &endlessStream{b: b, ctx: ctx}, &routerv1.RouteResponse{}, nil
}

type endlessStream struct {
	b    *endlessBackend
	ctx  context.Context
	sent int
}

func (s *endlessStream) Recv() (*decodev1.GenerateResponse, error) {
	if s.sent >= 5 {
		<-s.ctx.Done()
	}
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	resp := &decodev1.GenerateResponse{TokenIds: []uint32{s.b.token}}
	s.sent++
	if s.sent == 1 {
		resp.Prefill = &decodev1.PrefillDecision{Path: decodev1.PrefillPath_PREFILL_PATH_LOCAL}
	}
	return resp, nil
}

func (s *endlessStream) Close() error {
	s.b.once.Do(func() { close(s.b.closed) })
	return nil
}

// TestClientCancelClosesBackendStream: a client that goes away mid-stream must not
// leave the decode worker generating for nobody.
func TestClientCancelClosesBackendStream(t *testing.T) {
	b := &endlessBackend{token: testTokenizer(t).Encode("x")[0], closed: make(chan struct{})}
	f, _ := newTestFrontend(t, testConfig(), b)
	srv := newHTTPServer(t, f)
	c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "tandem-test",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}})
	for i := 0; i < 3 && s.Next(); i++ {
	}
	cancel()
	_ = s.Close()
	select {
	case <-b.closed:
	case <-time.After(30 * time.Second): // a deadlock guard, not a speed check
		t.Fatal("backend stream never closed after the client went away")
	}
}

// TestEveryLogLineHasRequestID checks the logs of a successful and a rejected
// request: a line without the id cannot be joined with the other services' lines.
func TestEveryLogLineHasRequestID(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&buf, &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tok := testTokenizer(t)
	b := &fakeBackend{output: tok.Encode("fine"), path: decodev1.PrefillPath_PREFILL_PATH_LOCAL}
	f, err := New(testConfig(), testModel(tok), b, logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h := f.HTTPHandler()
	do(t, h, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, "X-Request-Id", "log-1")
	do(t, h, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"top_p":7}`, "X-Request-Id", "log-2")
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("only %d log lines: %s", len(lines), buf.String())
	}
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if id, _ := rec["request_id"].(string); id != "log-1" && id != "log-2" {
			t.Errorf("log line without the request id: %s", line)
		}
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestUserOnLogLines: OpenAI's "user" field reaches the request's log lines (cut
// to a bound), so a response can be traced to the end user it was served to.
func TestUserOnLogLines(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&buf, &mu}, nil))
	tok := testTokenizer(t)
	b := &fakeBackend{output: tok.Encode("fine"), path: decodev1.PrefillPath_PREFILL_PATH_LOCAL}
	f, err := New(testConfig(), testModel(tok), b, logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h := f.HTTPHandler()
	long := strings.Repeat("é", 1000)
	if r := do(t, h, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"user":"user-42"}`, "X-Request-Id", "u-1"); r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if r := do(t, h, "POST", "/v1/completions", `{"prompt":"hi","stream":true,"user":"`+long+`"}`, "X-Request-Id", "u-2"); r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	users := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec struct {
			Msg       string `json:"msg"`
			RequestID string `json:"request_id"`
			User      string `json:"user"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Msg == "generation started" || rec.Msg == "generation ended" {
			users[rec.RequestID] = append(users[rec.RequestID], rec.User)
		}
	}
	if got := users["u-1"]; len(got) != 2 || got[0] != "user-42" || got[1] != "user-42" {
		t.Errorf("u-1's generation lines carry user %q, want user-42 on both", got)
	}
	for _, u := range users["u-2"] {
		if len(u) > 256+len("…") || !strings.HasPrefix(long, strings.TrimSuffix(u, "…")) || !utf8.ValidString(u) {
			t.Errorf("a 2000-byte user logged as %d bytes (%q...), want at most 256, cut on a character", len(u), u[:min(len(u), 20)])
		}
	}
	if len(users["u-2"]) != 2 {
		t.Errorf("u-2 has %d generation lines with a user, want 2", len(users["u-2"]))
	}
}

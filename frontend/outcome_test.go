package frontend

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
	"github.com/tandem-serve/tandem/proto/tandem/frontend/v1/frontendv1connect"
)

// outcomes records what OnOutcome hears.
type outcomes struct {
	mu  sync.Mutex
	all []Outcome
}

func (o *outcomes) add(x Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, x)
}

func (o *outcomes) last(t *testing.T, want int) Outcome {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.all) != want {
		t.Fatalf("%d outcomes, want %d", len(o.all), want)
	}
	return o.all[want-1]
}

// Every request that reached a decode worker is told to the observer once, at its
// end, whichever API it came through: where it ran and why, what the router and
// the decode worker each thought was cached, its tokens and its latencies.
func TestOutcomeOfEachRequest(t *testing.T) {
	tok := testTokenizer(t)
	b := &fakeBackend{output: tok.Encode(answer), perMsg: 2, path: decodev1.PrefillPath_PREFILL_PATH_REMOTE, cached: 32}
	f, _ := newTestFrontend(t, testConfig(), b)
	var got outcomes
	f.OnOutcome(got.add)
	srv := newHTTPServer(t, f)

	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"messages":[{"role":"user","content":"`+strings.Repeat("tell me a story ", 12)+`"}],"stream":true,"max_tokens":5}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	o := got.last(t, 1)
	if o.Endpoint != "chat_completions" || o.RequestID == "" || o.RequestID != resp.Header.Get("X-Request-Id") {
		t.Errorf("endpoint %q, request id %q (header %q)", o.Endpoint, o.RequestID, resp.Header.Get("X-Request-Id"))
	}
	if o.Path != "remote" || o.Reason != "above_threshold" || o.Policy != "threshold" || o.DecodeWorker != "decode-1" || o.PrefillWorker != "prefill-7" ||
		o.RouteReason == "" {
		t.Errorf("where and why: %+v", o)
	}
	if o.PromptTokens < 40 || o.DecodeCachedTokens != 32 || o.RouteCachedBlocks != 2 || o.CachedTokens != 32 || o.EffectiveTokens != o.PromptTokens-32 {
		t.Errorf("tokens: prompt %d, effective %d, decode cached %d, route cached blocks %d, cached %d",
			o.PromptTokens, o.EffectiveTokens, o.DecodeCachedTokens, o.RouteCachedBlocks, o.CachedTokens)
	}
	if o.CompletionTokens != 5 || o.Finish != "length" || o.TTFT <= 0 || o.ITL <= 0 || o.End.Before(o.Start.Add(o.TTFT)) {
		t.Errorf("completion %d, finish %q, TTFT %v, ITL %v, start %v end %v", o.CompletionTokens, o.Finish, o.TTFT, o.ITL, o.Start, o.End)
	}

	c := frontendv1connect.NewFrontendServiceClient(http.DefaultClient, srv.URL)
	stream, err := c.Generate(context.Background(), connect.NewRequest(&frontendv1.GenerateRequest{Prompt: "once upon a time", MaxTokens: 3}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if o := got.last(t, 2); o.Endpoint != "connect_generate" || o.CompletionTokens != 3 || o.Finish != "length" {
		t.Errorf("Connect request's outcome %+v", o)
	}

	// A stream that breaks after it started still ran somewhere: it is told, with
	// no finish reason.
	b.recvErr, b.failAfter = errors.New("decode worker died"), 1
	resp, err = http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hello","max_tokens":5}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if o := got.last(t, 3); o.Endpoint != "completions" || o.Finish != "" || o.Path != "remote" {
		t.Errorf("failed request's outcome %+v", o)
	}
}

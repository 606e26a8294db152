package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// sseServer is an OpenAI-style streaming server for the client tests. It answers
// with a role-only chunk at once, then the given content pieces gap apart, a
// finish chunk, a usage chunk (unless noUsage) and [DONE] (unless noDone).
type sseServer struct {
	pieces   []string
	first    time.Duration // wait before the first content chunk
	gap      time.Duration // wait between content chunks
	path     string        // x-tandem-prefill-path header
	bodyPath string        // prefill path in the first chunk's tandem field
	noUsage  bool
	noDone   bool
	errEvent string // sent instead of the last piece

	got  requestBody
	auth string
	url  string
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.url = r.URL.Path
	s.auth = r.Header.Get("Authorization")
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &s.got); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.path != "" {
		w.Header().Set(HeaderPrefillPath, s.path)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	send := func(v string) {
		fmt.Fprintf(w, "data: %s\n\n", v)
		w.(http.Flusher).Flush()
	}
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	tandem := ""
	if s.bodyPath != "" {
		tandem = fmt.Sprintf(`,"tandem":{"prefill_path":%q}`, s.bodyPath)
	}
	if chat {
		send(`{"choices":[{"index":0,"delta":{"role":"assistant"}}]` + tandem + `}`)
	} else if tandem != "" {
		send(`{"choices":[{"index":0,"text":""}]` + tandem + `}`)
	}
	fmt.Fprint(w, ": a comment line the client must skip\n\n")
	for i, p := range s.pieces {
		if i == 0 {
			time.Sleep(s.first)
		} else {
			time.Sleep(s.gap)
		}
		if s.errEvent != "" && i == len(s.pieces)-1 {
			send(fmt.Sprintf(`{"error":{"message":%q,"type":"server_error"}}`, s.errEvent))
			send("[DONE]")
			return
		}
		q, _ := json.Marshal(p)
		if chat {
			send(fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}`, q))
		} else {
			send(fmt.Sprintf(`{"choices":[{"index":0,"text":%s,"finish_reason":null}]}`, q))
		}
	}
	send(`{"choices":[{"index":0,"delta":{},"text":"","finish_reason":"length"}]}`)
	if !s.noUsage {
		send(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d,`+
			`"prompt_tokens_details":{"cached_tokens":3}}}`, len(s.pieces)+1, len(s.pieces)+8))
	}
	if !s.noDone {
		send("[DONE]")
	}
}

func TestClientMeasuresAChatStream(t *testing.T) {
	s := &sseServer{pieces: []string{" one", " two", " three", " four"}, first: 40 * time.Millisecond, gap: 15 * time.Millisecond, path: "remote"}
	ts := httptest.NewServer(s)
	defer ts.Close()
	c := &Client{URL: ts.URL + "/v1/", Endpoint: EndpointChat, Model: "m", APIKey: "k"}
	res := c.Do(context.Background(), Request{Class: "x", Prompt: "hello", MaxTokens: 9, PromptTokens: 1})

	if res.Err != "" {
		t.Fatalf("request failed: %s", res.Err)
	}
	if s.url != "/v1/chat/completions" || s.auth != "Bearer k" {
		t.Errorf("sent to %q with Authorization %q", s.url, s.auth)
	}
	if g := s.got; !g.Stream || !g.StreamOptions.IncludeUsage || g.MaxTokens != 9 || g.Model != "m" || !g.Prompt.IsZero() ||
		len(g.Messages) != 1 || g.Messages[0] != (Message{Role: "user", Content: "hello"}) {
		t.Errorf("request body = %+v", g)
	}
	// The role-only chunk came at once; the clock stops at the first content.
	if res.TTFT < s.first {
		t.Errorf("TTFT %v is shorter than the server's %v wait before content: the role chunk was counted", res.TTFT, s.first)
	}
	if len(res.ITL) != 3 || res.Chunks != 4 {
		t.Fatalf("%d ITL gaps from %d chunks; want 3 from 4", len(res.ITL), res.Chunks)
	}
	// One gap can look shorter than the server's when the chunk before it was read
	// late; the time to the last content cannot be shorter than the server took to
	// send it.
	for i, g := range res.ITL {
		if g < 0 {
			t.Errorf("ITL[%d] = %v, negative", i, g)
		}
	}
	sum := res.TTFT + res.ITL[0] + res.ITL[1] + res.ITL[2]
	if least := s.first + 3*s.gap; sum < least {
		t.Errorf("TTFT plus the gaps is %v, shorter than the %v the server took to send the last content", sum, least)
	}
	if res.E2E < sum {
		t.Errorf("E2E %v is shorter than TTFT plus the gaps, %v", res.E2E, sum)
	}
	// Usage wins over counting: the server says 5 tokens for 4 chunks.
	if !res.UsageReported || res.OutputTokens != 5 || res.PromptTokens != 7 || res.CachedTokens != 3 {
		t.Errorf("tokens: output %d prompt %d usage %v; want 5, 7, true", res.OutputTokens, res.PromptTokens, res.UsageReported)
	}
	if res.PrefillPath != "remote" || res.Class != "x" {
		t.Errorf("path %q class %q", res.PrefillPath, res.Class)
	}
	if res.text != " one two three four" {
		t.Errorf("text %q", res.text)
	}
}

func TestClientCompletionsCountsTokensWithoutUsage(t *testing.T) {
	p := testPrompts(t)
	s := &sseServer{pieces: []string{" apple", " river stone"}, noUsage: true, bodyPath: "local"}
	ts := httptest.NewServer(s)
	defer ts.Close()
	c := &Client{URL: ts.URL, Endpoint: EndpointCompletions, Tokenizer: p.Tokenizer()}
	res := c.Do(context.Background(), Request{Messages: []Message{{Role: "system", Content: "a"}, {Role: "user", Content: "b"}}, MaxTokens: 3})
	if res.Err != "" {
		t.Fatal(res.Err)
	}
	if s.url != "/v1/completions" || s.got.Prompt.text == nil || *s.got.Prompt.text != "a\n\nb" || s.got.Model != "" || s.auth != "" {
		t.Errorf("sent %+v to %s with auth %q", s.got, s.url, s.auth)
	}
	// " apple river stone" is three cl100k tokens in two chunks.
	if res.UsageReported || res.OutputTokens != 3 || res.Chunks != 2 {
		t.Errorf("output tokens %d from %d chunks (usage %v); want 3 counted from 2", res.OutputTokens, res.Chunks, res.UsageReported)
	}
	if res.PrefillPath != "local" {
		t.Errorf("path from the body's tandem field = %q, want local", res.PrefillPath)
	}
}

func TestClientRecordsFailures(t *testing.T) {
	for _, c := range []struct {
		name string
		h    http.Handler
		want string
	}{
		{"http error", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"max_tokens is too large","type":"invalid_request_error"}}`)
		}), "HTTP 400: max_tokens is too large"},
		{"error event", &sseServer{pieces: []string{"a", "b"}, errEvent: "engine died"}, "stream error: engine died"},
		{"no done", &sseServer{pieces: []string{"a"}, noDone: true}, "stream ended without [DONE]"},
		{"no content", &sseServer{}, "no content received"},
		{"bad json", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "data: {nope\n\n")
		}), "bad event"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(c.h)
			defer ts.Close()
			cl := &Client{URL: ts.URL, Endpoint: EndpointChat}
			res := cl.Do(context.Background(), Request{Prompt: "x", MaxTokens: 2})
			if !strings.HasPrefix(res.Err, c.want) || res.OK() {
				t.Errorf("Err = %q, want it to start with %q", res.Err, c.want)
			}
		})
	}
}

func TestClientDiscoverModel(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, `{"object":"list","data":[{"id":"tandem-tiny","object":"model"}]}`)
	}))
	defer ts.Close()
	m, err := (&Client{URL: ts.URL + "/v1", Endpoint: EndpointChat}).DiscoverModel(context.Background())
	if err != nil || m != "tandem-tiny" {
		t.Errorf("DiscoverModel = %q, %v", m, err)
	}
}

func TestClientValidate(t *testing.T) {
	for _, c := range []Client{{}, {URL: "localhost:8080", Endpoint: EndpointChat}, {URL: "http://x", Endpoint: "embeddings"}} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate accepted %+v", c)
		}
	}
}

func TestClientSendsTokenIDsAndIgnoreEOS(t *testing.T) {
	s := &sseServer{pieces: []string{" a", " b"}, noUsage: true}
	ts := httptest.NewServer(s)
	defer ts.Close()
	c := &Client{URL: ts.URL, Endpoint: EndpointCompletions}
	res := c.Do(context.Background(), Request{PromptIDs: []uint32{7, 8, 9}, MaxTokens: 3, IgnoreEOS: true})
	if res.Err != "" {
		t.Fatal(res.Err)
	}
	if g := s.got; !slices.Equal(g.Prompt.ids, []uint32{7, 8, 9}) || g.Prompt.text != nil || !g.IgnoreEOS || g.MaxTokens != 3 {
		t.Errorf("request body = %+v", g)
	}
	// Two tokens of the three enforced: a shortfall.
	if res.WantTokens != 3 || res.OutputTokens != 2 || !res.Short() {
		t.Errorf("want %d, got %d tokens, short %v; want 3, 2, true", res.WantTokens, res.OutputTokens, res.Short())
	}
	chat := &Client{URL: ts.URL, Endpoint: EndpointChat}
	if res := chat.Do(context.Background(), Request{PromptIDs: []uint32{7}, MaxTokens: 1}); res.Err == "" {
		t.Error("token ids were sent to the chat endpoint")
	}
}

package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandem-serve/tandem/internal/requestid"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
)

// reqsByID maps the backend's requests by request id.
func (b *fakeBackend) reqsByID() map[string]*decodev1.GenerateRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]*decodev1.GenerateRequest{}
	for _, r := range b.reqs {
		out[r.GetRequestId()] = r
	}
	return out
}

// TestSDKChatN: n=3 is three choices, indices 0..2, each its own backend request
// with its own id and seed (42, 43, 44 from seed 42); usage counts the prompt once
// and every choice's completion.
func TestSDKChatN(t *testing.T) {
	c, b, _ := sdkSetup(t, nil)
	var raw *http.Response
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")}
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "tandem-test", Messages: msgs, N: openai.Int(3), Seed: openai.Int(42), Temperature: openai.Float(1),
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 3 {
		t.Fatalf("%d choices, want 3", len(resp.Choices))
	}
	for i, ch := range resp.Choices {
		if ch.Index != int64(i) || ch.Message.Content != answer || ch.FinishReason != "stop" {
			t.Errorf("choice %d: index %d content %q finish %q", i, ch.Index, ch.Message.Content, ch.FinishReason)
		}
	}
	prompt, completion := chatPromptLen(t, Message{Role: "user", Content: "Say hello."}), len(testTokenizer(t).Encode(answer))
	if u := resp.Usage; u.PromptTokens != int64(prompt) || u.CompletionTokens != int64(3*completion) || u.TotalTokens != int64(prompt+3*completion) {
		t.Errorf("usage %+v, want prompt %d completion %d", u, prompt, 3*completion)
	}
	id := raw.Header.Get(requestid.Header)
	byID := b.reqsByID()
	for i := range 3 {
		r := byID[fmt.Sprintf("%s-%d", id, i)]
		if r == nil || r.GetSampling().GetSeed() != uint64(42+i) {
			t.Errorf("choice %d: backend request %v, want seed %d", i, r, 42+i)
		}
	}
}

// TestSDKChatNStream: the streamed choices interleave, each chunk carrying its
// index; each ends with its own finish_reason, and the usage chunk sums them.
func TestSDKChatNStream(t *testing.T) {
	c, _, _ := sdkSetup(t, nil)
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "tandem-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
		N: openai.Int(3), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	texts, finishes := make([]string, 3), make([]string, 3)
	var usage openai.CompletionUsage
	for stream.Next() {
		ch := stream.Current()
		for _, c := range ch.Choices {
			if c.Index < 0 || c.Index > 2 {
				t.Fatalf("choice index %d", c.Index)
			}
			texts[c.Index] += c.Delta.Content
			if c.FinishReason != "" {
				finishes[c.Index] = c.FinishReason
			}
		}
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if texts[i] != answer || finishes[i] != "stop" {
			t.Errorf("choice %d: %q finish %q", i, texts[i], finishes[i])
		}
	}
	if want := 3 * len(testTokenizer(t).Encode(answer)); usage.CompletionTokens != int64(want) {
		t.Errorf("usage %+v, want %d completion tokens", usage, want)
	}
}

// TestSDKCompletionBatchN: two prompts with n=2 are choices 0..3, prompt i's
// choices at i*2 and i*2+1; each backend request carries its own prompt.
func TestSDKCompletionBatchN(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole", true: "stream"}[streamed], func(t *testing.T) {
			c, b, _ := sdkSetup(t, nil)
			prompts := []string{"Once upon a time", "The cat sat"}
			p := openai.CompletionNewParams{Model: "tandem-test", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: prompts},
				N: openai.Int(2), MaxTokens: openai.Int(4)}
			var raw *http.Response
			texts, finishes := make([]string, 4), make([]string, 4)
			var usage openai.CompletionUsage
			if !streamed {
				resp, err := c.Completions.New(context.Background(), p, option.WithResponseInto(&raw))
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Choices) != 4 {
					t.Fatalf("%d choices, want 4", len(resp.Choices))
				}
				for i, ch := range resp.Choices {
					if ch.Index != int64(i) {
						t.Errorf("choice %d has index %d", i, ch.Index)
					}
					texts[i], finishes[i] = ch.Text, string(ch.FinishReason)
				}
				usage = resp.Usage
			} else {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				s := c.Completions.NewStreaming(context.Background(), p, option.WithResponseInto(&raw))
				for s.Next() {
					for _, ch := range s.Current().Choices {
						texts[ch.Index] += ch.Text
						if ch.FinishReason != "" {
							finishes[ch.Index] = string(ch.FinishReason)
						}
					}
					if u := s.Current().Usage; u.TotalTokens > 0 {
						usage = u
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
			}
			tok := testTokenizer(t)
			want := tok.Decode(tok.Encode(answer)[:4])
			for i := range 4 {
				if texts[i] != want || finishes[i] != "length" {
					t.Errorf("choice %d: %q finish %q, want %q length", i, texts[i], finishes[i], want)
				}
			}
			wantPrompt := len(tok.Encode(prompts[0])) + len(tok.Encode(prompts[1]))
			if usage.PromptTokens != int64(wantPrompt) || usage.CompletionTokens != 16 {
				t.Errorf("usage %+v, want prompt %d completion 16", usage, wantPrompt)
			}
			id, byID := raw.Header.Get(requestid.Header), b.reqsByID()
			for i := range 4 {
				r := byID[fmt.Sprintf("%s-%d", id, i)]
				if r == nil || !slices.Equal(r.GetPromptTokenIds(), tok.Encode(prompts[i/2])) {
					t.Errorf("choice %d: backend request %v, want prompt %q", i, r, prompts[i/2])
				}
			}
		})
	}
}

// TestChoicesBounds: n and the batch are bounded, and a bad prompt in a batch is
// named by its index.
func TestChoicesBounds(t *testing.T) {
	c, b, _ := sdkSetup(t, nil)
	many := make([]string, maxPrompts+1)
	for i := range many {
		many[i] = "x"
	}
	for _, tc := range []struct {
		p     openai.CompletionNewParams
		param string
	}{
		{openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}, N: openai.Int(maxN + 1)}, "n"},
		{openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}, N: openai.Int(0)}, "n"},
		{openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: many}}, "prompt"},
		{openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: many[:8]}, N: openai.Int(9)}, "n"},
		{openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokenArrays: [][]int64{{1}, {1 << 30}}}}, "prompt"},
	} {
		tc.p.Model = "tandem-test"
		_, err := c.Completions.New(context.Background(), tc.p)
		if e := sdkError(t, err); e.StatusCode != 400 || e.Param != tc.param {
			t.Errorf("status %d param %q (%s), want 400 naming %q", e.StatusCode, e.Param, e.Message, tc.param)
		}
	}
	if n := len(b.reqsByID()); n != 0 {
		t.Errorf("%d requests reached the backend", n)
	}
}

// countingBackend runs endless generations, counting those started and closed.
type countingBackend struct {
	token            uint32
	mu               sync.Mutex
	started, closed  int
	allStarted, done chan struct{}
	want             int
}

func (b *countingBackend) Generate(ctx context.Context, _ *decodev1.GenerateRequest) (TokenStream, *routerv1.RouteResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started++; b.started == b.want {
		close(b.allStarted)
	}
	return &countingStream{endlessStream: endlessStream{ctx: ctx, b: &endlessBackend{token: b.token}}, b: b}, &routerv1.RouteResponse{}, nil
}

type countingStream struct {
	endlessStream
	b    *countingBackend
	once sync.Once
}

func (s *countingStream) Close() error {
	s.once.Do(func() {
		s.b.mu.Lock()
		defer s.b.mu.Unlock()
		if s.b.closed++; s.b.closed == s.b.want {
			close(s.b.done)
		}
	})
	return nil
}

// TestChoicesClientCancel: a client that goes away ends every choice, streamed or not.
func TestChoicesClientCancel(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole", true: "stream"}[stream], func(t *testing.T) {
			b := &countingBackend{token: testTokenizer(t).Encode("x")[0], want: 3, allStarted: make(chan struct{}), done: make(chan struct{})}
			f, _ := newTestFrontend(t, testConfig(), b)
			srv := newHTTPServer(t, f)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			body := fmt.Sprintf(`{"model":"tandem-test","prompt":"hi","n":3,"stream":%v}`, stream)
			req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/completions", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			finished := make(chan struct{})
			go func() {
				defer close(finished)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				defer resp.Body.Close()
				if stream {
					if line, _ := bufio.NewReader(resp.Body).ReadString('\n'); !strings.HasPrefix(line, "data: ") {
						t.Errorf("first line %q, want an event", line)
					}
					cancel()
				}
				_, _ = io.Copy(io.Discard, resp.Body)
			}()
			<-b.allStarted
			if !stream {
				cancel()
			}
			select {
			case <-b.done:
			case <-time.After(30 * time.Second): // a deadlock guard, not a speed check
				b.mu.Lock()
				t.Fatalf("%d of 3 backend streams closed after the client went away", b.closed)
			}
			<-finished
		})
	}
}

// TestChoicesBeyondAdmission: more choices than requests may run at once is a 400
// at once, not choices waiting for one another until the queue times out.
func TestChoicesBeyondAdmission(t *testing.T) {
	cfg := testConfig()
	cfg.MaxInFlight = 2
	f, _ := newTestFrontend(t, cfg, &fakeBackend{output: testTokenizer(t).Encode(answer)})
	r := do(t, f.HTTPHandler(), "POST", "/v1/completions", `{"model":"tandem-test","prompt":"hi","n":3}`)
	if _, _, param, _ := errorShape(t, r.body); r.status != 400 || param == nil || *param != "n" {
		t.Errorf("%d %s, want 400 naming n", r.status, r.body)
	}
	if r := do(t, f.HTTPHandler(), "POST", "/v1/completions", `{"model":"tandem-test","prompt":"hi","n":2}`); r.status != 200 {
		t.Errorf("n=2 with 2 slots: %d %s", r.status, r.body)
	}
}

// TestChoicesStreamLogprobOffsets: each streamed choice's text_offset counts its
// own text, from 0, not the text of every choice before it.
func TestChoicesStreamLogprobOffsets(t *testing.T) {
	f, _ := newTestFrontend(t, testConfig(), &fakeBackend{output: testTokenizer(t).Encode(answer), perMsg: 1})
	r := do(t, f.HTTPHandler(), "POST", "/v1/completions", `{"model":"tandem-test","prompt":"hi","n":2,"logprobs":1,"stream":true}`)
	next := map[int]int{}
	for _, e := range sseEvents(t, r.body) {
		if e == "[DONE]" {
			continue
		}
		var c completion
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %q: %v", e, err)
		}
		for _, ch := range c.Choices {
			if ch.Logprobs == nil {
				continue
			}
			for k, off := range ch.Logprobs.TextOffset {
				if off != next[ch.Index] {
					t.Fatalf("choice %d: text_offset %d, want %d", ch.Index, off, next[ch.Index])
				}
				next[ch.Index] += len(ch.Logprobs.Tokens[k])
			}
		}
	}
	if next[0] == 0 || next[0] != next[1] {
		t.Errorf("offsets reached %v, want the same for both choices", next)
	}
}

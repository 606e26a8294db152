package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/internal/requestid"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

const answer = "Hello, world! 你好🤖 — alpha beta gamma delta."

// sdkSetup starts a server on a fake backend answering `answer` one token per
// message (so every hold-back path is exercised) and returns an SDK client.
func sdkSetup(t *testing.T, mutate func(*fakeBackend)) (openai.Client, *fakeBackend, *Frontend) {
	t.Helper()
	tok := testTokenizer(t)
	b := &fakeBackend{output: tok.Encode(answer), perMsg: 1, path: decodev1.PrefillPath_PREFILL_PATH_REMOTE, cached: 16}
	if mutate != nil {
		mutate(b)
	}
	f, _ := newTestFrontend(t, testConfig(), b)
	srv := newHTTPServer(t, f)
	c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return c, b, f
}

func chatPromptLen(t *testing.T, msgs ...Message) int {
	t.Helper()
	text, err := ChatML{}.Apply(msgs)
	if err != nil {
		t.Fatal(err)
	}
	return len(testTokenizer(t).Encode(text))
}

func TestSDKChatCompletion(t *testing.T) {
	c, b, _ := sdkSetup(t, nil)
	var raw *http.Response
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:       "tandem-test",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say hello.")},
		Temperature: openai.Float(0.5),
		TopP:        openai.Float(0.9),
		Seed:        openai.Int(42),
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != answer {
		t.Errorf("content = %q, want %q", got, answer)
	}
	if resp.Choices[0].FinishReason != "stop" || resp.Object != "chat.completion" || resp.Model != "tandem-test" {
		t.Errorf("finish=%q object=%q model=%q", resp.Choices[0].FinishReason, resp.Object, resp.Model)
	}
	wantPrompt := chatPromptLen(t, Message{Role: "system", Content: "Be brief."}, Message{Role: "user", Content: "Say hello."})
	wantCompletion := len(testTokenizer(t).Encode(answer))
	u := resp.Usage
	if u.PromptTokens != int64(wantPrompt) || u.CompletionTokens != int64(wantCompletion) ||
		u.TotalTokens != int64(wantPrompt+wantCompletion) || u.PromptTokensDetails.CachedTokens != 16 {
		t.Errorf("usage = %+v, want prompt %d completion %d cached 16", u, wantPrompt, wantCompletion)
	}
	if got := raw.Header.Get(HeaderPrefillPath); got != "remote" {
		t.Errorf("%s = %q, want remote", HeaderPrefillPath, got)
	}
	id := raw.Header.Get(requestid.Header)
	if id == "" || resp.ID != "chatcmpl-"+id {
		t.Errorf("id %q, request id header %q", resp.ID, id)
	}
	var ext prefillInfo
	if err := json.Unmarshal([]byte(resp.JSON.ExtraFields["tandem"].Raw()), &ext); err != nil {
		t.Fatalf("tandem extension: %v", err)
	}
	want := prefillInfo{Path: "remote", Reason: "above_threshold", Detail: "effective 40 tokens > threshold 16",
		DecodeWorker: "decode-1", PrefillWorker: "prefill-7", RouteReason: "least cost 3.0 of 2 candidates"}
	if ext != want {
		t.Errorf("tandem = %+v, want %+v", ext, want)
	}

	req := b.lastReq()
	if req.GetRequestId() != id || len(req.GetPromptTokenIds()) != wantPrompt {
		t.Errorf("backend got request id %q and %d prompt tokens", req.GetRequestId(), len(req.GetPromptTokenIds()))
	}
	sp := req.GetSampling()
	if sp.GetSeed() != 42 || sp.GetTemperature() != 0.5 || sp.GetTopP() != 0.9 {
		t.Errorf("sampling = %v", sp)
	}
	if req.GetMaxTokens() != 64 || len(req.GetStopTokenIds()) != 1 || req.GetStopTokenIds()[0] != 100257 {
		t.Errorf("max_tokens %d stop ids %v", req.GetMaxTokens(), req.GetStopTokenIds())
	}
}

func TestSDKCompletion(t *testing.T) {
	c, b, _ := sdkSetup(t, func(b *fakeBackend) { b.path = decodev1.PrefillPath_PREFILL_PATH_LOCAL })
	var raw *http.Response
	resp, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:     "tandem-test",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(3),
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	tok := testTokenizer(t)
	want := tok.Decode(tok.Encode(answer)[:3])
	if resp.Choices[0].Text != want || resp.Choices[0].FinishReason != "length" {
		t.Errorf("text %q finish %q, want %q length", resp.Choices[0].Text, resp.Choices[0].FinishReason, want)
	}
	if resp.Usage.PromptTokens != int64(len(tok.Encode("Once upon a time"))) || resp.Usage.CompletionTokens != 3 {
		t.Errorf("usage = %+v", resp.Usage)
	}
	if raw.Header.Get(HeaderPrefillPath) != "local" || !strings.HasPrefix(resp.ID, "cmpl-") {
		t.Errorf("path header %q id %q", raw.Header.Get(HeaderPrefillPath), resp.ID)
	}
	// Without a seed each request gets a fresh one, so sampling is not accidentally
	// deterministic across requests.
	first := b.lastReq().GetSampling().GetSeed()
	if _, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: "tandem-test",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}}); err != nil {
		t.Fatal(err)
	}
	if b.lastReq().GetSampling().GetSeed() == first {
		t.Error("two requests without a seed got the same seed")
	}
	if got := b.lastReq().GetSampling().GetTemperature(); got != 1 {
		t.Errorf("default temperature = %v, want 1", got)
	}
}

func TestSDKChatStreamWithUsage(t *testing.T) {
	c, _, _ := sdkSetup(t, func(b *fakeBackend) { b.path = decodev1.PrefillPath_PREFILL_PATH_FALLBACK })
	var raw *http.Response
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "tandem-test",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithResponseInto(&raw))
	var text strings.Builder
	var chunks []openai.ChatCompletionChunk
	for stream.Next() {
		ch := stream.Current()
		chunks = append(chunks, ch)
		if len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != answer {
		t.Errorf("streamed %q, want %q", text.String(), answer)
	}
	if raw.Header.Get(HeaderPrefillPath) != "fallback" {
		t.Errorf("path header %q", raw.Header.Get(HeaderPrefillPath))
	}
	if len(chunks) < 4 {
		t.Fatalf("only %d chunks", len(chunks))
	}
	if got := chunks[0].JSON.ExtraFields["tandem"].Raw(); !strings.Contains(got, `"prefill_path":"fallback"`) {
		t.Errorf("first chunk's tandem = %s", got)
	}
	if chunks[0].Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk role %q", chunks[0].Choices[0].Delta.Role)
	}
	fin := chunks[len(chunks)-2]
	if len(fin.Choices) != 1 || fin.Choices[0].FinishReason != "stop" {
		t.Errorf("second to last chunk = %s", fin.RawJSON())
	}
	last := chunks[len(chunks)-1]
	wantPrompt := chatPromptLen(t, Message{Role: "user", Content: "Say hello."})
	if len(last.Choices) != 0 || last.Usage.PromptTokens != int64(wantPrompt) ||
		last.Usage.CompletionTokens != int64(len(testTokenizer(t).Encode(answer))) || last.Usage.PromptTokensDetails.CachedTokens != 16 {
		t.Errorf("usage chunk = %s", last.RawJSON())
	}
	for _, ch := range chunks[:len(chunks)-1] {
		if ch.JSON.Usage.Valid() && ch.Usage.TotalTokens != 0 {
			t.Errorf("usage before the last chunk: %s", ch.RawJSON())
		}
	}
}

// TestSDKStopSequence uses a stop string that spans tokens: the output must end
// right before it, with nothing of it leaked in earlier chunks, and the backend
// stream must be closed so the decode worker stops.
func TestSDKStopSequence(t *testing.T) {
	tok := testTokenizer(t)
	stop := "a gam" // crosses " beta" / " gamma"
	if n := len(tok.Encode(stop)); n < 2 {
		t.Fatalf("stop string is %d token(s); it must span tokens", n)
	}
	want := answer[:strings.Index(answer, stop)]
	for _, stream := range []bool{false, true} {
		c, b, _ := sdkSetup(t, nil)
		params := openai.ChatCompletionNewParams{
			Model:         "tandem-test",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("go")},
			Stop:          openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"never", stop}},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}
		var got, finish string
		var completion int64
		if stream {
			s := c.Chat.Completions.NewStreaming(context.Background(), params)
			for s.Next() {
				ch := s.Current()
				if len(ch.Choices) > 0 {
					got += ch.Choices[0].Delta.Content
					if ch.Choices[0].FinishReason != "" {
						finish = ch.Choices[0].FinishReason
					}
				}
				completion = max(completion, ch.Usage.CompletionTokens)
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
		} else {
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
			resp, err := c.Chat.Completions.New(context.Background(), params)
			if err != nil {
				t.Fatal(err)
			}
			got, finish, completion = resp.Choices[0].Message.Content, resp.Choices[0].FinishReason, resp.Usage.CompletionTokens
		}
		if got != want || finish != "stop" {
			t.Errorf("stream=%v: %q finish %q, want %q stop", stream, got, finish, want)
		}
		all := len(tok.Encode(answer))
		if completion < 1 || completion >= int64(all) {
			t.Errorf("stream=%v: completion_tokens %d, want the tokens up to the stop (fewer than %d)", stream, completion, all)
		}
		if b.closedStreams() != 1 {
			t.Errorf("stream=%v: backend stream closed %d times", stream, b.closedStreams())
		}
	}
}

func sdkError(t *testing.T, err error) *openai.Error {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v (%T) is not an *openai.Error", err, err)
	}
	return apiErr
}

func TestSDKErrors(t *testing.T) {
	c, _, _ := sdkSetup(t, nil)
	ctx := context.Background()
	user := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}
	for _, tc := range []struct {
		name   string
		params openai.ChatCompletionNewParams
		status int
		param  string
		code   string
	}{
		{"temperature", openai.ChatCompletionNewParams{Model: "tandem-test", Messages: user, Temperature: openai.Float(2.5)}, 400, "temperature", ""},
		{"top_p", openai.ChatCompletionNewParams{Model: "tandem-test", Messages: user, TopP: openai.Float(0)}, 400, "top_p", ""},
		{"max_tokens", openai.ChatCompletionNewParams{Model: "tandem-test", Messages: user, MaxTokens: openai.Int(0)}, 400, "max_tokens", ""},
		{"max_completion_tokens", openai.ChatCompletionNewParams{Model: "tandem-test", Messages: user, MaxCompletionTokens: openai.Int(100000)}, 400,
			"max_completion_tokens", ""},
		{"n", openai.ChatCompletionNewParams{Model: "tandem-test", Messages: user, N: openai.Int(17)}, 400, "n", ""},
		{"empty messages", openai.ChatCompletionNewParams{Model: "tandem-test"}, 400, "messages", ""},
		{"unknown model", openai.ChatCompletionNewParams{Model: "gpt-9", Messages: user}, 404, "model", "model_not_found"},
		{"oversize", openai.ChatCompletionNewParams{Model: "tandem-test", Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage(strings.Repeat("a", 65<<10))}}, 413, "", ""},
	} {
		_, err := c.Chat.Completions.New(ctx, tc.params)
		apiErr := sdkError(t, err)
		if apiErr.StatusCode != tc.status || apiErr.Param != tc.param || apiErr.Code != tc.code {
			t.Errorf("%s: status %d param %q code %q, want %d %q %q (%s)", tc.name,
				apiErr.StatusCode, apiErr.Param, apiErr.Code, tc.status, tc.param, tc.code, apiErr.Message)
		}
		if tc.param != "" && !strings.Contains(apiErr.Message, tc.param) && tc.status == 400 {
			t.Errorf("%s: message %q does not name %s", tc.name, apiErr.Message, tc.param)
		}
	}
}

func TestSDKBackendErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		typ    string
	}{
		{connect.NewError(connect.CodeResourceExhausted, errors.New("queue full")), 429, "rate_limit_error"},
		{connect.NewError(connect.CodeUnavailable, errors.New("no healthy decode workers")), 503, "server_error"},
		{status.Error(codes.DeadlineExceeded, "decode deadline"), 504, "server_error"},
		{status.Error(codes.InvalidArgument, "prompt too long for worker"), 400, "invalid_request_error"},
		{connect.NewError(connect.CodeInternal, errors.New("boom")), 502, "server_error"},
		{errors.New("plain failure"), 502, "server_error"},
	} {
		c, _, _ := sdkSetup(t, func(b *fakeBackend) { b.err = tc.err })
		_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "tandem-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		apiErr := sdkError(t, err)
		if apiErr.StatusCode != tc.status || apiErr.Type != tc.typ {
			t.Errorf("%v: status %d type %q, want %d %q", tc.err, apiErr.StatusCode, apiErr.Type, tc.status, tc.typ)
		}
	}
}

func TestSDKStreamFailsMidway(t *testing.T) {
	c, _, _ := sdkSetup(t, func(b *fakeBackend) {
		b.recvErr = connect.NewError(connect.CodeUnavailable, errors.New("decode worker died"))
		b.failAfter = 3
	})
	s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "tandem-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	n := 0
	for s.Next() {
		n++
	}
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "decode worker died") {
		t.Errorf("stream error = %v, want the backend's message", err)
	}
	if n == 0 {
		t.Error("no chunks before the failure")
	}
}

func TestSDKModels(t *testing.T) {
	c, _, _ := sdkSetup(t, nil)
	page, err := c.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "tandem-test" {
		t.Errorf("models = %+v", page.Data)
	}
	if m, err := c.Models.Get(context.Background(), "tandem-test"); err != nil || m.ID != "tandem-test" {
		t.Errorf("get = %+v, %v", m, err)
	}
	_, err = c.Models.Get(context.Background(), "nope")
	if e := sdkError(t, err); e.StatusCode != 404 || e.Code != "model_not_found" {
		t.Errorf("get unknown = %d %q", e.StatusCode, e.Code)
	}
}

package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/tokenizer"
	"github.com/tandem-serve/tandem/toolcall"
)

const (
	weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Weather in a city",` +
		`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
	timeTool  = `{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}`
	hermesOut = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
		"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"
)

// toolSetup serves a fake backend that writes out, one token per message, through
// the detokenizer (engineText false) or as an engine's token_texts.
func toolSetup(t *testing.T, out string, engineText bool, cfg Config) (openai.Client, *fakeBackend, *prometheus.Registry) {
	t.Helper()
	tok := testTokenizer(t)
	ids := tok.Encode(out)
	b := &fakeBackend{output: ids, perMsg: 1}
	if engineText {
		for _, id := range ids {
			b.texts = append(b.texts, tok.Decode([]uint32{id}))
		}
	}
	f, reg := newTestFrontend(t, cfg, b)
	srv := newHTTPServer(t, f)
	return sdkClient(srv.URL), b, reg
}

func sdkClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

func weatherParams() openai.ChatCompletionNewParams {
	var p openai.ChatCompletionNewParams
	must(json.Unmarshal([]byte(`{"model":"tandem-test","messages":[{"role":"user","content":"Weather and time in Paris?"}],
		"tools":[`+weatherTool+`,`+timeTool+`]}`), &p))
	return p
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func TestToolCallsWhole(t *testing.T) {
	for _, engineText := range []bool{false, true} {
		c, _, reg := toolSetup(t, hermesOut, engineText, testConfig())
		resp, err := c.Chat.Completions.New(context.Background(), weatherParams())
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		calls := ch.Message.ToolCalls
		if ch.FinishReason != "tool_calls" || ch.Message.Content != "Let me check." || len(calls) != 2 {
			t.Fatalf("engine text %v: finish %q content %q calls %+v", engineText, ch.FinishReason, ch.Message.Content, calls)
		}
		if calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city": "Paris"}` || calls[0].Type != "function" ||
			!strings.HasPrefix(calls[0].ID, "call_") || calls[1].Function.Name != "get_time" || calls[1].Function.Arguments != "{}" || calls[0].ID == calls[1].ID {
			t.Errorf("calls %+v", calls)
		}
		if n := metricValue(t, reg, "tandem_tool_calls_total", "parser", "hermes", "enforced", "false"); n != 2 {
			t.Errorf("tandem_tool_calls_total = %v, want 2", n)
		}
	}
}

func TestToolCallsStreamed(t *testing.T) {
	for _, engineText := range []bool{false, true} {
		c, _, _ := toolSetup(t, hermesOut, engineText, testConfig())
		stream := c.Chat.Completions.NewStreaming(context.Background(), weatherParams())
		var acc openai.ChatCompletionAccumulator
		fragments, finish := 0, ""
		var content strings.Builder
		for stream.Next() {
			chunk := stream.Current()
			acc.AddChunk(chunk)
			if len(chunk.Choices) == 0 {
				continue
			}
			d := chunk.Choices[0].Delta
			content.WriteString(d.Content)
			for _, tc := range d.ToolCalls {
				if tc.Index == 0 && tc.Function.Arguments != "" {
					fragments++
				}
				if strings.Contains(d.Content, "<tool") {
					t.Errorf("marker text leaked into content: %q", d.Content)
				}
			}
			if chunk.Choices[0].FinishReason != "" {
				finish = chunk.Choices[0].FinishReason
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		calls := acc.Choices[0].Message.ToolCalls
		if finish != "tool_calls" || content.String() != "Let me check." || len(calls) != 2 ||
			calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city": "Paris"}` ||
			calls[1].Function.Name != "get_time" || calls[1].Function.Arguments != "{}" || !strings.HasPrefix(calls[1].ID, "call_") {
			t.Fatalf("engine text %v: finish %q content %q calls %+v", engineText, finish, content.String(), calls)
		}
		// One token per message: the arguments went out as they were generated.
		if fragments < 3 {
			t.Errorf("the first call's arguments came in %d fragments; want them streamed", fragments)
		}
	}
}

// Llama 3 and Mistral replies, named by --tool-call-parser, through an engine's text.
func TestToolCallParserFlag(t *testing.T) {
	for parser, out := range map[string]string{
		"llama3_json": `{"name": "get_weather", "parameters": {"city": "Paris"}}`,
		"mistral":     `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]`,
	} {
		cfg := testConfig()
		cfg.ToolCallParser = parser
		c, _, _ := toolSetup(t, out, true, cfg)
		resp, err := c.Chat.Completions.New(context.Background(), weatherParams())
		if err != nil {
			t.Fatal(err)
		}
		calls := resp.Choices[0].Message.ToolCalls
		if len(calls) != 1 || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city": "Paris"}` {
			t.Errorf("%s: calls %+v", parser, calls)
		}
		if parser == "mistral" && len(calls) == 1 && len(calls[0].ID) != 9 {
			t.Errorf("mistral call id %q; its template wants 9 alphanumerics", calls[0].ID)
		}
		raw := resp.RawJSON()
		if !strings.Contains(raw, `"tool_call_parser":"`+parser+`"`) {
			t.Errorf("%s: the tandem extension does not name the parser: %s", parser, raw)
		}
	}
}

func TestToolChoiceSetsConstraint(t *testing.T) {
	for _, tc := range []struct {
		choice   string
		parallel string
		want     *toolcall.Constraint
	}{
		{`"auto"`, "", nil},
		{`"none"`, "", nil},
		{`"required"`, "", ptr(toolcall.Hermes{}.Constraint(weatherTools(), true))},
		{`"required"`, `,"parallel_tool_calls":false`, ptr(toolcall.Hermes{}.Constraint(weatherTools(), false))},
		{`{"type":"function","function":{"name":"get_time"}}`, "", ptr(toolcall.Hermes{}.Constraint(weatherTools()[1:], true))},
	} {
		b := &fakeBackend{output: []uint32{1}}
		f, _ := newTestFrontend(t, testConfig(), b)
		r := do(t, f.HTTPHandler(), "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[`+
			weatherTool+`,`+timeTool+`],"tool_choice":`+tc.choice+tc.parallel+`}`)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", tc.choice, r.status, r.body)
		}
		got := b.reqs[0].GetSampling().GetConstraint()
		switch {
		case tc.want == nil && got != nil:
			t.Errorf("%s: constraint %v, want none", tc.choice, got)
		case tc.want != nil && (got == nil || got.GetJsonSchema() != tc.want.JSONSchema || got.GetPrefix() != tc.want.Prefix ||
			got.GetSuffix() != tc.want.Suffix || got.GetRepeat() != tc.want.Repeat || got.GetSeparator() != tc.want.Separator):
			t.Errorf("%s%s: constraint %v, want %+v", tc.choice, tc.parallel, got, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// weatherTools are weatherTool and timeTool as the parser's tools.
func weatherTools() []toolcall.Tool {
	return []toolcall.Tool{
		{Name: "get_weather", Description: "Weather in a city",
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
		{Name: "get_time", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
	}
}

func TestToolRequestsRefused(t *testing.T) {
	f, _ := newTestFrontend(t, testConfig(), &fakeBackend{output: []uint32{1}})
	h := f.HTTPHandler()
	user := `{"role":"user","content":"hi"}`
	call := `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}`
	for _, tc := range []struct{ body, param string }{
		{`"tools":[` + weatherTool + `],"tool_choice":{"type":"function","function":{"name":"nope"}}`, "tool_choice.function.name"},
		{`"tools":[` + weatherTool + `],"tool_choice":"sometimes"`, "tool_choice"},
		{`"tool_choice":"required"`, "tool_choice"},
		{`"tools":[{"type":"retrieval"}]`, "tools[0].type"},
		{`"tools":[{"type":"function","function":{"name":"has space"}}]`, "tools[0].function.name"},
		{`"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]`, "tools[0].function.parameters"},
		{`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"string"}}}]`, "tools[0].function.parameters"},
		{`"tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{"a":3}}}}]`, "tools[0].function.parameters"},
		{`"tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{},"required":["a"]}}}]`, "tools[0].function.parameters"},
		{`"tools":[` + weatherTool + `,` + weatherTool + `]`, "tools[1].function.name"},
		{`"tools":[{"type":"function","function":{"name":"f","description":"<|endoftext|>"}}]`, "tools[0]"},
		{`"tools":[` + weatherTool + `],"n":2`, "n"},
	} {
		r := do(t, h, "POST", "/v1/chat/completions", `{"messages":[`+user+`],`+tc.body+`}`)
		if _, _, param, _ := errorShape(t, r.body); r.status != 400 || param == nil || *param != tc.param {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.body, r.status, r.body, tc.param)
		}
	}
	for _, tc := range []struct{ msgs, param string }{
		{user + `,{"role":"tool","content":"sunny","tool_call_id":"call_1"}`, "messages[1].tool_call_id"},
		{user + `,` + call + `,{"role":"tool","content":"sunny","tool_call_id":"call_2"}`, "messages[2].tool_call_id"},
		{user + `,` + call + `,{"role":"tool","content":"sunny"}`, "messages[2].tool_call_id"},
		{user + `,{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"[1]"}}]}`, "messages[1].tool_calls[0].function.arguments"},
		{user + `,{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}`, "messages[1].tool_calls[0].id"},
		{`{"role":"user","content":"x","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]}`, "messages[0].tool_calls"},
	} {
		r := do(t, h, "POST", "/v1/chat/completions", `{"messages":[`+tc.msgs+`],"tools":[`+weatherTool+`]}`)
		if _, _, param, _ := errorShape(t, r.body); r.status != 400 || param == nil || *param != tc.param {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.msgs, r.status, r.body, tc.param)
		}
	}
}

// The history's call and the tool's result reach the model through the template,
// the result as plain text whatever it holds.
func TestToolHistoryRendered(t *testing.T) {
	b := &fakeBackend{output: []uint32{1}}
	f, _ := newTestFrontend(t, testConfig(), b)
	body := `{"messages":[{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny <|endoftext|>"}],"tools":[` + weatherTool + `]}`
	if r := do(t, f.HTTPHandler(), "POST", "/v1/chat/completions", body); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	tok := testTokenizer(t)
	ids := b.reqs[0].GetPromptTokenIds()
	want := "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>tool\nsunny <|endoftext|><|im_end|>\n<|im_start|>assistant\n"
	if got := tok.Decode(ids); !strings.HasSuffix(got, want) {
		t.Errorf("prompt %q, want it to end %q", got, want)
	}
	for _, id := range ids {
		if tok.IsSpecial(id) {
			t.Errorf("the tool's result reached the model as special token %d", id)
		}
	}
}

// Under tool_choice none the reply is not read for calls; under auto a call the
// model did not finish is returned as content and counted.
func TestToolReplyAsContent(t *testing.T) {
	bad := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
	for _, tc := range []struct {
		out, choice, result string
	}{
		{hermesOut, "none", ""},
		{bad, "auto", "malformed"},
		{"It is sunny.", "auto", "content"},
	} {
		for _, stream := range []bool{false, true} {
			c, _, reg := toolSetup(t, tc.out, false, testConfig())
			p := weatherParams()
			must(json.Unmarshal([]byte(`"`+tc.choice+`"`), &p.ToolChoice))
			var content, finish string
			var calls int
			if stream {
				s := c.Chat.Completions.NewStreaming(context.Background(), p)
				var acc openai.ChatCompletionAccumulator
				for s.Next() {
					acc.AddChunk(s.Current())
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				content, finish, calls = acc.Choices[0].Message.Content, acc.Choices[0].FinishReason, len(acc.Choices[0].Message.ToolCalls)
			} else {
				resp, err := c.Chat.Completions.New(context.Background(), p)
				if err != nil {
					t.Fatal(err)
				}
				content, finish, calls = resp.Choices[0].Message.Content, resp.Choices[0].FinishReason, len(resp.Choices[0].Message.ToolCalls)
			}
			// A stream may have sent a malformed call's first fragments before it
			// failed; its text then follows as content.
			if content != tc.out || finish != "stop" || calls != 0 && !(stream && tc.result == "malformed") {
				t.Errorf("%s, stream %v: content %q finish %q calls %d; want the text as content", tc.choice, stream, content, finish, calls)
			}
			if tc.result != "" {
				if n := metricValue(t, reg, "tandem_frontend_tool_call_replies_total", "parser", "hermes", "result", tc.result); n != 1 {
					t.Errorf("%s, stream %v: %s replies counted %v, want 1", tc.choice, stream, tc.result, n)
				}
			}
		}
	}
}

// A call marker that is a control token in the model's vocabulary ([TOOL_CALLS]
// in Mistral's), which the detokenizer renders as nothing, still reaches the parser.
func TestControlTokenMarker(t *testing.T) {
	spec := tokenizer.Spec{Model: tokenizer.ModelLlama, Tokens: []string{"<unk>", "<s>", "</s>", "[TOOL_CALLS]"},
		Types: []int32{tokenizer.TokenUnknown, tokenizer.TokenControl, tokenizer.TokenControl, tokenizer.TokenControl},
		UNK:   0, BOS: 1, EOS: 2, PAD: tokenizer.NoToken, EOT: tokenizer.NoToken, EOM: tokenizer.NoToken}
	for b := range 256 {
		spec.Tokens = append(spec.Tokens, fmt.Sprintf("<0x%02X>", b))
		spec.Types = append(spec.Types, tokenizer.TokenByte)
	}
	tok, err := tokenizer.FromSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]uint32{3}, tok.Encode(`[{"name":"get_weather","arguments":{"city":"Paris"}}]`)...)
	cfg := testConfig()
	cfg.ToolCallParser = "mistral"
	f, err := New(cfg, &Model{ID: "m", ContextLength: 4096, Tokenizer: tok, Template: ChatML{}}, &fakeBackend{output: out, perMsg: 1},
		slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := do(t, f.HTTPHandler(), "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":200,"tools":[`+weatherTool+`]}`)
	var resp chatCompletion
	if err := json.Unmarshal([]byte(r.body), &resp); err != nil || len(resp.Choices) != 1 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if m := resp.Choices[0].Message; len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" || resp.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("reply %s; want the call after the [TOOL_CALLS] token", r.body)
	}
}

// parallel_tool_calls false: only the first of the model's calls is returned.
func TestParallelToolCallsFalse(t *testing.T) {
	c, _, _ := toolSetup(t, hermesOut, false, testConfig())
	p := weatherParams()
	p.ParallelToolCalls = openai.Bool(false)
	resp, err := c.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if calls := resp.Choices[0].Message.ToolCalls; len(calls) != 1 || calls[0].Function.Name != "get_weather" {
		t.Errorf("calls %+v; want the first only", calls)
	}
	s := c.Chat.Completions.NewStreaming(context.Background(), p)
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if calls := acc.Choices[0].Message.ToolCalls; len(calls) != 1 || calls[0].Function.Name != "get_weather" || acc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("streamed calls %+v; want the first only", calls)
	}
}

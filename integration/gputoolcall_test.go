package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
	"github.com/tandem-serve/tandem/tokenizer"
)

// A GPU engine streaming only text (--engine-token-ids text) that writes a Hermes
// tool call: the frontend reads the call from the engine's text, whole and
// streamed through the SDK, as it does the native engine's tokens.
func TestGPUTextToolCall(t *testing.T) {
	f, err := gguf.Open(storiesGGUF)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	const reply = "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	ids := tok.Encode(reply)
	text, detok := map[uint32]string{}, tokenizer.NewDetokenizer(tok).StartOfText()
	var joined string
	for _, id := range ids {
		s := detok.Add(id)
		if prev, ok := text[id]; ok && prev != s {
			t.Fatalf("token %d reads %q and %q: the fake's Text cannot say both", id, prev, s)
		}
		text[id], joined = s, joined+s
	}
	if joined != reply {
		t.Fatalf("the fake would stream %q, not %q", joined, reply)
	}
	eng := (&fakeengine.Server{Kind: fakeengine.VLLM, Output: append(ids, tok.EOS()),
		Text: func(id uint32) string { return text[id] }}).Start(t)
	dec := startService(t, "decode", "--listen", "127.0.0.1:0", "--id", "decode-text", "--engine", "vllm", "--engine-url", eng.URL(),
		"--engine-token-ids", "text", "--tokenizer", storiesGGUF, "--model", "fake-model", "--engine-wait", "30s")
	rtr := startService(t, "router", "--listen", "127.0.0.1:0", "--decode-workers", dec)
	fe := startService(t, "frontend", "--listen", "127.0.0.1:0", "--router", rtr)
	waitHealthy(t, fe)

	client := openai.NewClient(option.WithBaseURL("http://"+fe+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	var p openai.ChatCompletionNewParams
	if err := json.Unmarshal([]byte(`{"model":"fake-model","max_tokens":128,"messages":[{"role":"user","content":"Weather in Paris?"}],
	  "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`), &p); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	check := func(how string, m openai.ChatCompletionMessage, finish string) {
		t.Helper()
		if finish != "tool_calls" || m.Content != "Sure." || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" ||
			m.ToolCalls[0].Function.Arguments != `{"city": "Paris"}` || !strings.HasPrefix(m.ToolCalls[0].ID, "call_") {
			t.Errorf("%s: finish %q content %q calls %+v", how, finish, m.Content, m.ToolCalls)
		}
	}
	check("whole", resp.Choices[0].Message, resp.Choices[0].FinishReason)
	s := client.Chat.Completions.NewStreaming(ctx, p)
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	check("streamed", acc.Choices[0].Message, acc.Choices[0].FinishReason)
}

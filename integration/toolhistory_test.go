package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// The second half of an agent's round trip, which needs no constrained decoding:
// a call in the history (content null) and the tool's result sent back through
// the SDK to stories260K, answered in text, whole and streamed; a result naming
// no call is a 400 naming its tool_call_id.
func TestToolResultSentBack(t *testing.T) {
	_, url := startUpWith(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	call := openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ChatCompletionMessageToolCallUnion{{
		ID: "call_1", Type: "function", Function: openai.ChatCompletionMessageFunctionToolCallFunction{Name: "get_weather", Arguments: `{"city": "Paris"}`},
	}}}
	p := toolParams(t, "stories260K", "required")
	p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
	p.MaxTokens = openai.Int(16)
	p.Messages = append(p.Messages, call.ToParam(), openai.ToolMessage("Sunny, 21 C", "call_1"))

	resp, err := client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if ch := resp.Choices[0]; ch.Message.Content == "" || ch.FinishReason != "length" {
		t.Errorf("answer %q finish %q; want 16 tokens of text", ch.Message.Content, ch.FinishReason)
	}
	s := client.Chat.Completions.NewStreaming(ctx, p)
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if ch := acc.Choices[0]; ch.Message.Content == "" || ch.FinishReason != "length" {
		t.Errorf("streamed answer %q finish %q; want 16 tokens of text", ch.Message.Content, ch.FinishReason)
	}

	p.Messages[len(p.Messages)-1] = openai.ToolMessage("Sunny, 21 C", "call_2")
	_, err = client.Chat.Completions.New(ctx, p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "messages[2].tool_call_id" {
		t.Errorf("a result answering no call: %v; want a 400 naming messages[2].tool_call_id", err)
	}
}

package integration

// These tests need the engine to enforce engine.Sampling.Constraint (constrained
// decoding, the `structured` branch): on a branch without it, tool_choice
// required is only a constraint the engine ignores, and they fail.

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// toolParams asks for weather with two tools; city is an enum so that a random
// model's call is short.
// toolParams' choice is "required" or the name of the function to call.
func toolParams(t *testing.T, model, choice string) openai.ChatCompletionNewParams {
	t.Helper()
	var p openai.ChatCompletionNewParams
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"What is the weather in Paris?"}],
	  "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather in a city",
	    "parameters":{"type":"object","properties":{"city":{"type":"string","enum":["Paris","Rome"]}},"required":["city"],"additionalProperties":false}}},
	   {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{},"additionalProperties":false}}}],
	  "max_tokens":256,"temperature":1}`
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	// The SDK's own constructors: unmarshalling a named choice into its union
	// leaves the name empty.
	if choice == "required" {
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	} else {
		p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: choice})
	}
	return p
}

// checkCall fails unless c calls one of names with arguments its schema allows.
func checkCall(t *testing.T, c openai.ChatCompletionMessageToolCallUnion, names ...string) {
	t.Helper()
	var args map[string]any
	if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil || !slices.Contains(names, c.Function.Name) || c.ID == "" {
		t.Errorf("call %q(%s) id %q: want one of %v with an arguments object (%v)", c.Function.Name, c.Function.Arguments, c.ID, names, err)
		return
	}
	if c.Function.Name == "get_weather" && (len(args) != 1 || (args["city"] != "Paris" && args["city"] != "Rome")) {
		t.Errorf("get_weather arguments %s do not match its schema", c.Function.Arguments)
	}
	if c.Function.Name == "get_time" && len(args) != 0 {
		t.Errorf("get_time arguments %s do not match its schema", c.Function.Arguments)
	}
}

// tool_choice required always yields a call, and a named function that function,
// ended by the constraint (finish tool_calls),
// whole and streamed, on stories260K and on random weights (where only the
// constraint makes a call at all), for several seeds.
func TestToolChoiceRequiredAlwaysCalls(t *testing.T) {
	for _, m := range []struct{ name, model, env string }{{"stories260K", "stories260K", ""}, {"tiny", "tandem-tiny", fixtureModel}} {
		t.Run(m.name, func(t *testing.T) {
			var env []string
			if m.env != "" {
				env = []string{m.env}
			}
			_, url := startUpWith(t, env)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
			for seed := range int64(8) {
				for _, choice := range []string{"required", "get_weather"} {
					p := toolParams(t, m.model, choice)
					p.Seed = openai.Int(seed)
					// One call, then only a stop token: with parallel calls a model that
					// never chooses to stop (random weights) writes calls until
					// max_tokens cuts one, as any engine's would.
					p.ParallelToolCalls = openai.Bool(false)
					names := []string{"get_weather", "get_time"}
					if choice != "required" {
						names = names[:1]
					}
					resp, err := client.Chat.Completions.New(ctx, p)
					if err != nil {
						t.Fatal(err)
					}
					ch := resp.Choices[0]
					if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) == 0 {
						t.Fatalf("seed %d %s: finish %q content %.80q calls %d; want a call", seed, choice, ch.FinishReason, ch.Message.Content, len(ch.Message.ToolCalls))
					}
					for _, c := range ch.Message.ToolCalls {
						checkCall(t, c, names...)
					}

					s := client.Chat.Completions.NewStreaming(ctx, p)
					var acc openai.ChatCompletionAccumulator
					for s.Next() {
						acc.AddChunk(s.Current())
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					if acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) == 0 {
						t.Fatalf("seed %d %s streamed: finish %q calls %d; want a call", seed, choice, acc.Choices[0].FinishReason, len(acc.Choices[0].Message.ToolCalls))
					}
					for _, c := range acc.Choices[0].Message.ToolCalls {
						checkCall(t, c, names...)
					}
				}
			}
		})
	}
}

// The round trip an agent makes, with the SDK: the model's call (enforced), the
// tool's result sent back with the call in the history, and the final answer,
// whole and streamed.
func TestToolCallRoundTrip(t *testing.T) {
	_, url := startUpWith(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	for _, stream := range []bool{false, true} {
		p := toolParams(t, "stories260K", "get_weather")
		p.Seed = openai.Int(1)
		var msg openai.ChatCompletionMessage
		if stream {
			s := client.Chat.Completions.NewStreaming(ctx, p)
			var acc openai.ChatCompletionAccumulator
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			msg = acc.Choices[0].Message
		} else {
			resp, err := client.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			msg = resp.Choices[0].Message
		}
		if len(msg.ToolCalls) == 0 {
			t.Fatalf("stream %v: no call: %.80q", stream, msg.Content)
		}
		checkCall(t, msg.ToolCalls[0], "get_weather")

		p.Messages = append(p.Messages, msg.ToParam())
		for _, c := range msg.ToolCalls {
			p.Messages = append(p.Messages, openai.ToolMessage("Sunny, 21 C", c.ID))
		}
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
		p.MaxTokens = openai.Int(16)
		var final openai.ChatCompletionChoice
		if stream {
			s := client.Chat.Completions.NewStreaming(ctx, p)
			var acc openai.ChatCompletionAccumulator
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatalf("the tool's result sent back: %v", err)
			}
			final = acc.Choices[0]
		} else {
			resp, err := client.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatalf("the tool's result sent back: %v", err)
			}
			final = resp.Choices[0]
		}
		if final.Message.Content == "" || len(final.Message.ToolCalls) != 0 || final.FinishReason == "tool_calls" {
			t.Errorf("stream %v: final answer %q, finish %q, calls %d", stream, final.Message.Content, final.FinishReason, len(final.Message.ToolCalls))
		}
	}
}

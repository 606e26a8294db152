package frontend

import (
	"context"
	"testing"

	frontendv1 "github.com/tandem-serve/tandem/proto/tandem/frontend/v1"
)

// Tools over Connect and gRPC: the calls come as typed ToolCallDelta pieces, the
// finish reason is tool_calls, and a required call sends the constraint.
func TestConnectToolCalls(t *testing.T) {
	tok := testTokenizer(t)
	b := &fakeBackend{output: tok.Encode(hermesOut), perMsg: 1}
	f, _ := newTestFrontend(t, testConfig(), b)
	tools := []*frontendv1.Tool{
		{Name: "get_weather", Description: "Weather in a city", ParametersJson: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`},
		{Name: "get_time", ParametersJson: `{"type":"object","properties":{}}`},
	}
	for name, c := range rpcClients(t, f, false) {
		t.Run(name, func(t *testing.T) {
			res := c.generate(context.Background(), &frontendv1.GenerateRequest{
				Messages: []*frontendv1.ChatMessage{{Role: "user", Content: "Weather and time in Paris?"}},
				Tools:    tools, ToolChoice: frontendv1.ToolChoice_TOOL_CHOICE_REQUIRED,
			}, "tools-"+name)
			if res.code != 0 {
				t.Fatalf("%v: %s", res.code, res.message)
			}
			var content string
			var names, args []string
			var finish, parser string
			for _, m := range res.msgs {
				content += m.GetText()
				for _, d := range m.GetToolCalls() {
					if d.GetName() != "" {
						names, args = append(names, d.GetName()), append(args, "")
					}
					args[d.GetIndex()] += d.GetArguments()
				}
				if m.GetFinishReason() != "" {
					finish = m.GetFinishReason()
				}
				if m.GetPrefill() != nil {
					parser = m.GetPrefill().GetToolCallParser()
				}
			}
			if content != "Let me check." || finish != "tool_calls" || len(names) != 2 || names[0] != "get_weather" ||
				args[0] != `{"city": "Paris"}` || names[1] != "get_time" || args[1] != "{}" || parser != "hermes" {
				t.Errorf("content %q finish %q calls %v %v parser %q", content, finish, names, args, parser)
			}
			b.mu.Lock()
			sent := b.reqs[len(b.reqs)-1].GetSampling().GetConstraint()
			b.mu.Unlock()
			if sent.GetPrefix() != "<tool_call>\n" || !sent.GetRepeat() {
				t.Errorf("constraint %v, want Hermes' repeated call", sent)
			}
		})
	}
	res := rpcClients(t, f, false)["connect"].generate(context.Background(), &frontendv1.GenerateRequest{
		Messages: []*frontendv1.ChatMessage{{Role: "user", Content: "hi"}},
		Tools:    tools, ToolChoice: frontendv1.ToolChoice_TOOL_CHOICE_FUNCTION, ToolChoiceFunction: "nope",
	}, "tools-bad")
	if res.field != "tool_choice.function.name" {
		t.Errorf("an unknown function: %v %s (field %q)", res.code, res.message, res.field)
	}
}

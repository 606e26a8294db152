package chattemplate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// toolCase is one entry of testdata/tool_cases.json (see gen_tool_cases.py).
type toolCase struct {
	Name     string `json:"name"`
	Template string `json:"template"`
	BOSToken string `json:"bos_token"`
	EOSToken string `json:"eos_token"`
	Messages []struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Want string `json:"want"`
}

// TestToolTemplates renders the tool-calling templates of Qwen 2.5, Qwen 3,
// Llama 3.1 and Mistral Nemo with tools, an assistant's call and the tool's
// result, and wants Jinja2's text byte for byte.
func TestToolTemplates(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "tool_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Tool  json.RawMessage `json:"tool"`
		Cases []toolCase      `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			tmpl, err := New(readTemplate(t, c.Template), Options{BOSToken: c.BOSToken, EOSToken: c.EOSToken})
			if err != nil {
				t.Fatal(err)
			}
			var msgs []Message
			for _, m := range c.Messages {
				msg := Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
				for _, tc := range m.ToolCalls {
					msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
				}
				msgs = append(msgs, msg)
			}
			got, err := tmpl.RenderTools(msgs, []json.RawMessage{file.Tool}, true)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.Want {
				t.Errorf("got\n%s\nwant\n%s", got, c.Want)
			}
		})
	}
}

func TestToolsKeepKeyOrder(t *testing.T) {
	tmpl, err := New("{% for t in tools %}{{ t | tojson }}{% endfor %}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	tool := `{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": [1.5, null, true]}}}`
	got, err := tmpl.RenderTools([]Message{{Role: "user", Content: "hi"}}, []json.RawMessage{json.RawMessage(tool)}, false)
	if err != nil || got != tool {
		t.Errorf("got %q, %v; want the tool as sent, %q", got, err, tool)
	}
	deep := json.RawMessage(strings.Repeat("[", 100) + strings.Repeat("]", 100))
	if _, err := tmpl.RenderTools(nil, []json.RawMessage{deep}, false); err == nil || !strings.Contains(err.Error(), "nested") {
		t.Errorf("a tool nested 100 deep: err %v; want it refused", err)
	}
}

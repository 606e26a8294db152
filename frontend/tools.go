package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/tandem-serve/tandem/tokenizer"
	"github.com/tandem-serve/tandem/toolcall"
)

// The request side of tool calls: the tools a chat request offers, its
// tool_choice, and the calls and results in its history, checked and turned into
// what the chat template and the tool-call parser need.

// toolJSON is one entry of "tools".
type toolJSON struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

// toolsField keeps each tool's text as sent (the template renders it so) beside
// its decoded form.
type toolsField struct {
	raw   []json.RawMessage
	tools []toolJSON
}

func (f *toolsField) UnmarshalJSON(b []byte) error {
	if firstByte(b) == 'n' {
		return nil
	}
	if firstByte(b) != '[' {
		return typeError(b, reflect.TypeFor[[]toolJSON]())
	}
	if err := json.Unmarshal(b, &f.raw); err != nil {
		return err
	}
	f.tools = make([]toolJSON, len(f.raw))
	for i, r := range f.raw {
		if firstByte(r) != '{' {
			return typeError(r, reflect.TypeFor[toolJSON]())
		}
		if err := json.Unmarshal(r, &f.tools[i]); err != nil {
			return err
		}
	}
	if f.raw == nil {
		f.raw = []json.RawMessage{}
	}
	return nil
}

// toolChoiceField is "none", "auto", "required" or {"type": "function",
// "function": {"name": ...}}.
type toolChoiceField struct {
	set  bool
	mode string // none, auto, required, or function
	name string
}

func (c *toolChoiceField) UnmarshalJSON(b []byte) error {
	switch firstByte(b) {
	case 'n':
		return nil
	case '"':
		c.set = true
		return json.Unmarshal(b, &c.mode)
	case '{':
		var v struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		c.set, c.mode, c.name = true, "function:"+v.Type, v.Function.Name
		return nil
	}
	return typeError(b, reflect.TypeFor[string]())
}

// toolCallJSON is a call in an assistant message of the history, and in a response.
type toolCallJSON struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolRequest is what a chat request asks of tools, checked.
type toolRequest struct {
	// raw are the tools as sent, for the template; tools the same for the parser.
	raw   []json.RawMessage
	tools []toolcall.Tool
	// choice is none, auto, required or function (then name is the function).
	choice   string
	name     string
	parallel bool
}

// parses says whether the reply is read for calls: tool_choice none renders the
// tools but reads nothing, as OpenAI's none means the model will not call one.
func (t *toolRequest) parses() bool { return t != nil && t.choice != "none" }

// enforced says whether the reply must be a call.
func (t *toolRequest) enforced() bool {
	return t != nil && (t.choice == "required" || t.choice == "function")
}

// allowed are the tools a required reply may call.
func (t *toolRequest) allowed() []toolcall.Tool {
	if t.choice == "function" {
		i := slices.IndexFunc(t.tools, func(x toolcall.Tool) bool { return x.Name == t.name })
		return t.tools[i : i+1]
	}
	return t.tools
}

// OpenAI's rule for a function's name.
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// maxTools bounds a request's tools: each is a branch of the enforced schema.
const maxTools = 128

// parseTools checks tools, tool_choice and parallel_tool_calls; nil when the
// request offers no tools.
func parseTools(f *toolsField, c toolChoiceField, parallel *bool) (*toolRequest, error) {
	if f.raw == nil || len(f.tools) == 0 {
		if c.set && c.mode != "none" && c.mode != "auto" {
			return nil, invalidField("tool_choice", "tool_choice %q needs tools; the request has none", strings.TrimPrefix(c.mode, "function:"))
		}
		return nil, nil
	}
	if len(f.tools) > maxTools {
		return nil, invalidField("tools", "%d tools given; at most %d are allowed", len(f.tools), maxTools)
	}
	t := &toolRequest{raw: f.raw, choice: "auto", parallel: parallel == nil || *parallel}
	for i, tj := range f.tools {
		field := fmt.Sprintf("tools[%d]", i)
		switch {
		case tj.Type != "function":
			return nil, invalidField(field+".type", "%s.type is %q; only \"function\" tools are supported", field, tj.Type)
		case tj.Function == nil:
			return nil, invalidField(field+".function", "%s.function is required", field)
		case !toolNameRE.MatchString(tj.Function.Name):
			return nil, invalidField(field+".function.name",
				"%s.function.name %q must be 1 to 64 letters, digits, underscores or dashes", field, tj.Function.Name)
		case slices.ContainsFunc(t.tools, func(x toolcall.Tool) bool { return x.Name == tj.Function.Name }):
			return nil, invalidField(field+".function.name", "%s.function.name %q names a tool given before", field, tj.Function.Name)
		}
		if err := checkSchema(tj.Function.Parameters); err != nil {
			return nil, invalidField(field+".function.parameters", "%s.function.parameters is not a JSON Schema of an object: %v", field, err)
		}
		t.tools = append(t.tools, toolcall.Tool{Name: tj.Function.Name, Description: tj.Function.Description, Parameters: tj.Function.Parameters})
	}
	if c.set {
		switch {
		case c.mode == "none" || c.mode == "auto" || c.mode == "required":
			t.choice = c.mode
		case c.mode == "function:function":
			if !slices.ContainsFunc(t.tools, func(x toolcall.Tool) bool { return x.Name == c.name }) {
				return nil, invalidField("tool_choice.function.name", "tool_choice names the function %q, which is not among the tools", c.name)
			}
			t.choice, t.name = "function", c.name
		case strings.HasPrefix(c.mode, "function:"):
			return nil, invalidField("tool_choice.type", "tool_choice.type is %q; only \"function\" is supported", strings.TrimPrefix(c.mode, "function:"))
		default:
			return nil, invalidField("tool_choice", "tool_choice %q is not one of none, auto, required or a {\"type\": \"function\"} object", c.mode)
		}
	}
	return t, nil
}

// checkSchema accepts an absent schema or an object whose keywords have the types
// JSON Schema gives them; the engine's compiler judges the rest when a call is
// enforced.
func checkSchema(raw json.RawMessage) error {
	if len(bytes.TrimSpace(raw)) == 0 || firstByte(raw) == 'n' {
		return nil
	}
	var s struct {
		Type       json.RawMessage            `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if firstByte(raw) != '{' {
		return fmt.Errorf("it is a JSON %s, not an object", jsonKind(raw))
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	if len(s.Type) > 0 {
		var typ string
		if json.Unmarshal(s.Type, &typ) != nil || typ != "object" {
			return fmt.Errorf(`its "type" is %s; the arguments are an object, so it must be "object"`, s.Type)
		}
	}
	for name, p := range s.Properties {
		if k := firstByte(p); k != '{' && k != 't' && k != 'f' {
			return fmt.Errorf("property %q is a JSON %s, not a schema", name, jsonKind(p))
		}
	}
	for _, r := range s.Required {
		if s.Properties != nil {
			if _, ok := s.Properties[r]; !ok {
				return fmt.Errorf("%q is required but not among the properties", r)
			}
		}
	}
	return nil
}

// historyMessage checks the tool parts of messages[i] (an assistant's calls, a
// tool's result) against the calls made before it, recorded in ids.
func historyMessage(i int, in chatMessage, out *Message, ids map[string]bool) error {
	field := fmt.Sprintf("messages[%d]", i)
	if len(in.ToolCalls) > 0 && in.Role != "assistant" {
		return invalidField(field+".tool_calls", "%s.tool_calls: only an assistant message makes tool calls", field)
	}
	for j, c := range in.ToolCalls {
		cf := fmt.Sprintf("%s.tool_calls[%d]", field, j)
		switch {
		case c.Type != "" && c.Type != "function":
			return invalidField(cf+".type", "%s.type is %q; only \"function\" calls are supported", cf, c.Type)
		case c.ID == "":
			return invalidField(cf+".id", "%s.id is required: the tool's result names it", cf)
		case c.Function.Name == "":
			return invalidField(cf+".function.name", "%s.function.name is required", cf)
		}
		args := strings.TrimSpace(c.Function.Arguments)
		if args == "" {
			args = "{}"
		}
		if !strings.HasPrefix(args, "{") || !json.Valid([]byte(args)) {
			return invalidField(cf+".function.arguments", "%s.function.arguments must be a JSON object as text", cf)
		}
		ids[c.ID] = true
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args})
	}
	if in.Role == "tool" {
		if in.ToolCallID == "" {
			return invalidField(field+".tool_call_id", "%s.tool_call_id is required in a tool message", field)
		}
		if !ids[in.ToolCallID] {
			return invalidField(field+".tool_call_id", "%s.tool_call_id %q answers no tool call made before it", field, in.ToolCallID)
		}
		out.ToolCallID, out.Name = in.ToolCallID, in.Name
	}
	return nil
}

// checkToolText refuses tool text that holds a special token's text: tools and
// the history's calls reach the template as JSON, which it writes in place (no
// placeholder can stand for them), so such text would become the token.
func checkToolText(tok tokenizer.Tokenizer, t *toolRequest, msgs []Message) error {
	plain := func(s string) bool { return slices.Equal(tok.Encode(s), tok.EncodeSpecial(s)) }
	if t != nil {
		for i, r := range t.raw {
			if !plain(string(r)) {
				return invalidField(fmt.Sprintf("tools[%d]", i), "tools[%d] holds the text of a special token, which would reach the model as that token", i)
			}
		}
	}
	for i, m := range msgs {
		for j, c := range m.ToolCalls {
			if !plain(c.Name) || !plain(c.Arguments) || !plain(c.ID) {
				return invalidField(fmt.Sprintf("messages[%d].tool_calls[%d]", i, j),
					"messages[%d].tool_calls[%d] holds the text of a special token, which would reach the model as that token", i, j)
			}
		}
	}
	return nil
}

package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tandem-serve/tandem/chattemplate"
)

// Message is one turn of a chat, whatever the transport.
type Message struct {
	Role    string
	Content string
	// ToolCalls are an assistant turn's calls; ToolCallID and Name say which call
	// a "tool" turn answers and the function's name.
	ToolCalls  []ToolCall
	ToolCallID string
	Name       string
}

// ToolCall is a call in the history: its arguments are a JSON object as text.
type ToolCall struct {
	ID, Name, Arguments string
}

// toolTemplate is a ChatTemplate that can show the model tools.
type toolTemplate interface {
	// ApplyTools is Apply with tools, each an OpenAI tool object as JSON text.
	ApplyTools(msgs []Message, tools []json.RawMessage) (string, error)
}

// applyTemplate renders msgs, with tools when there are any and tmpl takes them.
func applyTemplate(tmpl ChatTemplate, msgs []Message, tools []json.RawMessage) (string, error) {
	if tt, ok := tmpl.(toolTemplate); ok {
		return tt.ApplyTools(msgs, tools)
	}
	return tmpl.Apply(msgs)
}

// ChatTemplate renders a conversation into the text the model continues.
type ChatTemplate interface {
	Name() string
	// Apply renders msgs, ending where the assistant's reply begins. It fails, with
	// an error naming the offending message, on a role it does not know.
	Apply(msgs []Message) (string, error)
	// StopStrings are the markers that end the assistant's turn; generation stops
	// there as if the client had asked for them as stop sequences.
	StopStrings() []string
}

// ChatML renders `<|im_start|>role\ncontent<|im_end|>\n` per message and ends with
// `<|im_start|>assistant\n`.
//
// cl100k_base has no im_start/im_end special tokens, so the markers are encoded as
// ordinary text (a handful of tokens each). The model sees the same tokens whether
// the marker came from the template or from a user typing it, so a user can forge
// turns; with a vocabulary that has the markers as special tokens, a template would
// encode them as such and escape them in content. "<|im_end|>" is a stop string so
// that a model trained on ChatML ends its turn where it means to.
type ChatML struct{}

var _ ChatTemplate = ChatML{}

// Name implements ChatTemplate.
func (ChatML) Name() string { return "chatml" }

// StopStrings implements ChatTemplate.
func (ChatML) StopStrings() []string { return []string{"<|im_end|>"} }

// Apply implements ChatTemplate.
func (c ChatML) Apply(msgs []Message) (string, error) { return c.ApplyTools(msgs, nil) }

// ApplyTools implements toolTemplate. The tools are not shown: ChatML serves the
// random-weight models, which read nothing; an assistant's calls are written as
// Qwen's template writes them, and a tool's result as a "tool" turn.
func (ChatML) ApplyTools(msgs []Message, _ []json.RawMessage) (string, error) {
	var sb strings.Builder
	for i, m := range msgs {
		role := m.Role
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer":
			// OpenAI's newer name for system instructions; ChatML knows only system.
			role = "system"
		default:
			return "", invalidField(fmt.Sprintf("messages[%d].role", i),
				"unknown role %q in messages[%d]; expected system, developer, user, assistant or tool", m.Role, i)
		}
		sb.WriteString("<|im_start|>")
		sb.WriteString(role)
		sb.WriteByte('\n')
		sb.WriteString(m.Content)
		for j, c := range m.ToolCalls {
			if j > 0 || m.Content != "" {
				sb.WriteByte('\n')
			}
			name, _ := json.Marshal(c.Name)
			fmt.Fprintf(&sb, "<tool_call>\n{\"name\": %s, \"arguments\": %s}\n</tool_call>", name, c.Arguments)
		}
		sb.WriteString("<|im_end|>\n")
	}
	sb.WriteString("<|im_start|>assistant\n")
	return sb.String(), nil
}

// checkRoles accepts the roles a chat request may use and maps OpenAI's
// "developer" to "system", the name templates know; anything else is refused
// with the offending message named.
func checkRoles(msgs []Message) ([]chattemplate.Message, error) {
	out := make([]chattemplate.Message, len(msgs))
	for i, m := range msgs {
		role := m.Role
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer":
			role = "system"
		default:
			return nil, invalidField(fmt.Sprintf("messages[%d].role", i),
				"unknown role %q in messages[%d]; expected system, developer, user, assistant or tool", m.Role, i)
		}
		out[i] = chattemplate.Message{Role: role, Content: m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		for _, c := range m.ToolCalls {
			out[i].ToolCalls = append(out[i].ToolCalls, chattemplate.ToolCall{ID: c.ID, Name: c.Name, Arguments: json.RawMessage(c.Arguments)})
		}
	}
	return out, nil
}

// Jinja is a model's own chat template (or, for a model without one, the plain
// transcript fallback), from package chattemplate.
type Jinja struct {
	T *chattemplate.Template
}

var _ ChatTemplate = Jinja{}

// Name implements ChatTemplate.
func (j Jinja) Name() string {
	if j.T.IsFallback() {
		return "fallback"
	}
	return "model"
}

// StopStrings implements ChatTemplate.
func (j Jinja) StopStrings() []string { return j.T.StopStrings() }

// Apply implements ChatTemplate. A conversation the template refuses (its
// raise_exception) is a 400 with the template's own words; so is a template that
// fails on this conversation, since nothing else about the request is wrong.
func (j Jinja) Apply(msgs []Message) (string, error) { return j.ApplyTools(msgs, nil) }

// ApplyTools implements toolTemplate.
func (j Jinja) ApplyTools(msgs []Message, tools []json.RawMessage) (string, error) {
	cm, err := checkRoles(msgs)
	if err != nil {
		return "", err
	}
	text, err := j.T.RenderTools(cm, tools, true)
	if err != nil {
		var re *chattemplate.RaiseError
		if errors.As(err, &re) {
			return "", invalidField("messages", "the model's chat template refuses this conversation: %s", re.Message)
		}
		return "", invalidField("messages", "the model's chat template cannot render this conversation: %v", err)
	}
	return text, nil
}

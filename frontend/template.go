package frontend

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tandem-serve/tandem/chattemplate"
)

// Message is one turn of a chat, whatever the transport.
type Message struct {
	Role    string
	Content string
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
func (ChatML) Apply(msgs []Message) (string, error) {
	var sb strings.Builder
	for i, m := range msgs {
		role := m.Role
		switch role {
		case "system", "user", "assistant":
		case "developer":
			// OpenAI's newer name for system instructions; ChatML knows only system.
			role = "system"
		default:
			return "", invalidField(fmt.Sprintf("messages[%d].role", i),
				"unknown role %q in messages[%d]; expected system, developer, user or assistant", m.Role, i)
		}
		sb.WriteString("<|im_start|>")
		sb.WriteString(role)
		sb.WriteByte('\n')
		sb.WriteString(m.Content)
		sb.WriteString("<|im_end|>\n")
	}
	sb.WriteString("<|im_start|>assistant\n")
	return sb.String(), nil
}

// checkRoles accepts the roles a chat request may use and maps OpenAI's
// "developer" to "system", the name templates know. Tools are not served, so
// "tool" (and anything else) is refused with the offending message named.
func checkRoles(msgs []Message) ([]chattemplate.Message, error) {
	out := make([]chattemplate.Message, len(msgs))
	for i, m := range msgs {
		role := m.Role
		switch role {
		case "system", "user", "assistant":
		case "developer":
			role = "system"
		default:
			return nil, invalidField(fmt.Sprintf("messages[%d].role", i),
				"unknown role %q in messages[%d]; expected system, developer, user or assistant", m.Role, i)
		}
		out[i] = chattemplate.Message{Role: role, Content: m.Content}
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
func (j Jinja) Apply(msgs []Message) (string, error) {
	cm, err := checkRoles(msgs)
	if err != nil {
		return "", err
	}
	text, err := j.T.Render(cm, true)
	if err != nil {
		var re *chattemplate.RaiseError
		if errors.As(err, &re) {
			return "", invalidField("messages", "the model's chat template refuses this conversation: %s", re.Message)
		}
		return "", invalidField("messages", "the model's chat template cannot render this conversation: %v", err)
	}
	return text, nil
}

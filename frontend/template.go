package frontend

import (
	"fmt"
	"strings"
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

func templateByName(name string) (ChatTemplate, error) {
	switch name {
	case "", "chatml":
		return ChatML{}, nil
	default:
		return nil, fmt.Errorf("frontend: unknown chat template %q (known: chatml)", name)
	}
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

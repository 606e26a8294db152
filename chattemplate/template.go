package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string
	Content string
	// ToolCalls are an assistant turn's calls; the key is absent from the
	// message when there are none, as templates test `'tool_calls' in message`.
	ToolCalls []ToolCall
	// ToolCallID is the call a "tool" turn answers.
	ToolCallID string
	// Name is the function a "tool" turn's result comes from, when the client says.
	Name string
}

// Options are the values a template reads besides the conversation. They come from
// the tokenizer: the text of its BOS and EOS tokens.
type Options struct {
	BOSToken string
	EOSToken string
	// Now is the clock strftime_now reads (Llama 3.2's template writes today's
	// date into the system turn). Nil means time.Now.
	Now func() time.Time
}

// Template is a compiled chat template. It is safe for concurrent use: each Render
// runs with its own scope and bounds.
type Template struct {
	tmpl *jinja.Template // nil for the fallback
	opts Options
	src  string
}

// RaiseError is the template refusing the conversation through
// raise_exception(msg), e.g. "Conversation roles must alternate
// user/assistant/user/assistant/...". Its text is the template's message, so it
// can be shown to the client as what is wrong with the request.
type RaiseError struct {
	Message string
}

func (e *RaiseError) Error() string { return e.Message }

// ErrLimit is wrapped by the error of a render stopped by one of the package's
// bounds (iterations, macro nesting, time): the template, not the request, is at
// fault unless the conversation is enormous.
var ErrLimit = errors.New("chattemplate: the template ran past its limit")

// New compiles a chat template. A template that does not parse is an error naming
// the line (and column, when it can be known).
func New(source string, opts Options) (*Template, error) {
	const fails = "chattemplate: the chat template does not compile"
	switch {
	case strings.TrimSpace(source) == "":
		return nil, errors.New("chattemplate: the chat template is empty")
	case len(source) > maxSourceLen:
		return nil, fmt.Errorf("%s: it is %d bytes, more than %d", fails, len(source), maxSourceLen)
	case strings.Contains(source, guardPrefix):
		return nil, fmt.Errorf("%s: it uses the reserved name prefix %q", fails, guardPrefix)
	}
	src := normalizeNewlines(source)
	tags, err := scanTags(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fails, err)
	}
	if err := checkTags(tags); err != nil {
		return nil, fmt.Errorf("%s: %w", fails, err)
	}
	tmpl, err := compile(rewrite(src, tags))
	if err != nil {
		// The rewrite keeps every line where it was, so the library's line numbers
		// are the template's.
		if problem := blockProblem(tags); problem != "" {
			return nil, fmt.Errorf("%s: %s (%w)", fails, problem, err)
		}
		return nil, fmt.Errorf("%s: %w", fails, err)
	}
	return &Template{tmpl: tmpl, opts: opts, src: source}, nil
}

// compile runs the library's compiler, turning a panic into an error.
func compile(source string) (tmpl *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			tmpl, err = nil, fmt.Errorf("the Jinja library panicked: %v", r)
		}
	}()
	return jinja.Compile(source)
}

// Fallback returns the plain transcript used when a model has no chat template
// (see the package documentation).
func Fallback() *Template { return &Template{} }

// IsFallback reports whether t is the fallback rather than a model's template.
func (t *Template) IsFallback() bool { return t.tmpl == nil }

// StopStrings are text markers that end the assistant's reply. A model's own
// template needs none (its end-of-turn token stops generation); the fallback's
// reply ends where the model starts another speaker's line.
func (t *Template) StopStrings() []string {
	if t.tmpl == nil {
		return []string{"\nUser:", "\nSystem:"}
	}
	return nil
}

// Render renders msgs. With addGenerationPrompt the text ends where the
// assistant's reply begins. A conversation the template refuses is a *RaiseError;
// a render stopped by a bound wraps ErrLimit; any other error is the template
// failing (a type error, an unknown filter) and names what the library reported.
func (t *Template) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	return t.RenderTools(msgs, nil, addGenerationPrompt)
}

// RenderTools is Render with the tools the model may call, each an OpenAI tool
// object ({"type": "function", "function": {"name", "description",
// "parameters"}}) as JSON text; nil tools are none.
func (t *Template) RenderTools(msgs []Message, tools []json.RawMessage, addGenerationPrompt bool) (string, error) {
	if t.tmpl == nil {
		return renderFallback(msgs, addGenerationPrompt), nil
	}
	return t.render(msgs, tools, addGenerationPrompt)
}

// Source is the template's text; empty for the fallback.
func (t *Template) Source() string { return t.src }

func (t *Template) render(msgs []Message, tools []json.RawMessage, addGenerationPrompt bool) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out = ""
			err = fmt.Errorf("chattemplate: the Jinja library panicked rendering the template: %v", r)
		}
	}()
	b := newBudget(time.Now())
	data, err := t.data(msgs, tools, addGenerationPrompt, b)
	if err != nil {
		return "", err
	}
	out, err = t.tmpl.RenderValues(data)
	if err != nil {
		var re *RaiseError
		if errors.As(err, &re) || errors.Is(err, ErrLimit) || strings.HasPrefix(err.Error(), "chattemplate: ") {
			return "", err
		}
		if msg := err.Error(); strings.Contains(msg, guardUnsafe) {
			return "", fmt.Errorf("chattemplate: the template changes a list or dict in place, which transformers' sandbox forbids too: %s",
				strings.ReplaceAll(msg, guardUnsafe, ""))
		}
		return "", fmt.Errorf("chattemplate: rendering the chat template: %w", err)
	}
	return out, nil
}

// data is what the template sees, as transformers passes it.
func (t *Template) data(msgs []Message, tools []json.RawMessage, addGenerationPrompt bool, b *budget) (map[string]jinja.Value, error) {
	items := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		if len(m.ToolCalls) > 0 {
			calls, err := toolCallsValue(m.ToolCalls)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			d.AsDict().Set("tool_calls", calls)
		}
		if m.ToolCallID != "" {
			d.AsDict().Set("tool_call_id", jinja.NewString(m.ToolCallID))
		}
		if m.Name != "" {
			d.AsDict().Set("name", jinja.NewString(m.Name))
		}
		items[i] = d
	}
	toolsV, err := toolsValue(tools)
	if err != nil {
		return nil, err
	}
	now := t.opts.Now
	if now == nil {
		now = time.Now
	}
	return map[string]jinja.Value{
		"messages":              jinja.NewList(items),
		"add_generation_prompt": jinja.NewBool(addGenerationPrompt),
		"bos_token":             jinja.NewString(t.opts.BOSToken),
		"eos_token":             jinja.NewString(t.opts.EOSToken),
		"tools":                 toolsV,
		"documents":             jinja.None(),
		"raise_exception":       jinja.NewCallable("raise_exception", raiseException),
		"strftime_now":          jinja.NewCallable("strftime_now", strftimeNow(now)),
		"range":                 jinja.NewCallable("range", b.rangeFunc),
		guardDict:               jinja.NewCallable(guardDict, keywordDict),
		guardStep:               jinja.NewCallable(guardStep, b.step),
		guardEnter:              jinja.NewCallable(guardEnter, b.enter),
		guardLeave:              jinja.NewCallable(guardLeave, b.leave),
		guardAssigned:           jinja.NewCallable(guardAssigned, b.assigned),
	}, nil
}

func renderFallback(msgs []Message, addGenerationPrompt bool) string {
	var sb strings.Builder
	for _, m := range msgs {
		sb.WriteString(speaker(m.Role))
		sb.WriteString(": ")
		sb.WriteString(m.Content)
		sb.WriteByte('\n')
	}
	if addGenerationPrompt {
		sb.WriteString("Assistant:")
	}
	return sb.String()
}

// speaker is a role as a transcript names it: "user" is "User".
func speaker(role string) string {
	r, n := utf8.DecodeRuneInString(role)
	if n == 0 {
		return "Unknown"
	}
	return string(unicode.ToUpper(r)) + role[n:]
}

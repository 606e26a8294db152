// Package chattemplate renders a conversation into the prompt text a model was
// trained on, with the model's own chat template: the Jinja source a GGUF file
// carries in `tokenizer.chat_template`, or a Hugging Face tokenizer_config.json in
// `chat_template`.
//
// Templates are compiled and run by github.com/ardanlabs/jinja, a pure-Go Jinja
// written for chat templates. Rendering follows transformers' apply_chat_template,
// the reference every template is written against: trim_blocks and lstrip_blocks
// are on; the template sees `messages` (a list of {role, content}),
// `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and `documents` (both
// none), `raise_exception(msg)` and `strftime_now(fmt)`.
//
// The rendered text is the whole prompt: a template that writes bos_token at its
// start (Llama 2 and 3, Mistral, Gemma) puts the BOS text there, so the caller
// tokenizes it with special tokens parsed and does not add a second BOS (as
// transformers does with add_special_tokens=False; llama.cpp instead strips the
// leading BOS text when the tokenizer adds one).
//
// # The fallback
//
// A model without a template gets [Fallback]: a plain transcript, one line per
// message with the role capitalised, ending with "Assistant:" when a reply is
// wanted:
//
//	System: You are terse.
//	User: Hello
//	Assistant: Hi.
//	User: Why is the sky blue?
//	Assistant:
//
// llama.cpp falls back to ChatML instead. ChatML's `<|im_start|>` markers only mean
// something to a model whose vocabulary has them as special tokens and that was
// tuned on them; a model that ships without a template is most often a base model
// (tandem's default, stories260K, is one), for which the markers are a run of odd
// sub-word pieces it has never seen, while a transcript of named speakers is text it
// has read. The prompt ends at the colon, without a space, because SentencePiece
// and byte-level BPE vocabularies put the space at the start of the next word.
// Nothing is written for BOS or EOS: the tokenizer adds BOS as the model's settings
// say. The fallback's [Template.StopStrings] end a reply where the model starts
// writing the next speaker's line.
//
// # Bounds
//
// A template is a program from the model file. Whatever it does, Render returns:
// a panic in the library becomes an error, and a run is stopped with an error
// wrapping [ErrLimit] past 262,144 loop iterations and macro calls (range() items
// count too), 64 nested macro calls, or one second. The library offers no hook
// inside a loop or a macro, so New inserts an inert call at the top of every loop
// body and around every macro body (see guard.go). What cannot be bounded this way
// is one huge allocation: `'x' * 10**11`, `indent(10**11)`, or a string doubled in
// a loop 40 times exhausts memory before the next check.
package chattemplate

import (
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
// the line (and column, when the library gives one).
func New(source string, opts Options) (*Template, error) {
	if strings.TrimSpace(source) == "" {
		return nil, errors.New("chattemplate: the chat template is empty")
	}
	if strings.Contains(source, guardPrefix) {
		return nil, fmt.Errorf("chattemplate: the chat template uses the reserved name prefix %q", guardPrefix)
	}
	// The original compiles first, so that its errors name lines and columns of
	// the source as written; the guarded copy only adds text inside lines.
	if _, err := compile(source); err != nil {
		return nil, fmt.Errorf("chattemplate: the chat template does not compile: %w", describeSyntaxError(source, err))
	}
	guarded, err := addGuards(source)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: the chat template does not compile: %w", err)
	}
	tmpl, err := compile(guarded)
	if err != nil {
		// A guard that breaks a template the library accepts is this package's bug;
		// say so rather than blame the template.
		return nil, fmt.Errorf("chattemplate: internal error: guarded template does not compile: %w", err)
	}
	return &Template{tmpl: tmpl, opts: opts}, nil
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
	if t.tmpl == nil {
		return renderFallback(msgs, addGenerationPrompt), nil
	}
	return t.render(msgs, addGenerationPrompt)
}

func (t *Template) render(msgs []Message, addGenerationPrompt bool) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out = ""
			err = fmt.Errorf("chattemplate: the Jinja library panicked rendering the template: %v", r)
		}
	}()
	b := newBudget(time.Now())
	out, err = t.tmpl.RenderValues(t.data(msgs, addGenerationPrompt, b))
	if err != nil {
		var re *RaiseError
		if errors.As(err, &re) || errors.Is(err, ErrLimit) {
			return "", err
		}
		return "", fmt.Errorf("chattemplate: rendering the chat template: %w", err)
	}
	return out, nil
}

// data is what the template sees, as transformers passes it.
func (t *Template) data(msgs []Message, addGenerationPrompt bool, b *budget) map[string]jinja.Value {
	items := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		items[i] = d
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
		"tools":                 jinja.None(),
		"documents":             jinja.None(),
		"raise_exception":       jinja.NewCallable("raise_exception", raiseException),
		"strftime_now":          jinja.NewCallable("strftime_now", strftimeNow(now)),
		"range":                 jinja.NewCallable("range", b.rangeFunc),
		guardStep:               jinja.NewCallable(guardStep, b.step),
		guardEnter:              jinja.NewCallable(guardEnter, b.enter),
		guardLeave:              jinja.NewCallable(guardLeave, b.leave),
	}
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

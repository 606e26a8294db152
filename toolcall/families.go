package toolcall

import "strings"

// parse runs a whole reply through a stream of f.
func parse(f format, text string) (string, []Call, bool) {
	s := newStream(f)
	s.Push(text)
	s.Close()
	if s.Failed() {
		return text, nil, false
	}
	if len(s.Calls()) == 0 {
		return text, nil, true
	}
	return strings.TrimSpace(s.Content()), s.Calls(), true
}

// Hermes is the format of Qwen 2.5 and 3 and of the Hermes models:
// `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`, one block per call.
type Hermes struct{}

var hermesFormat = format{markers: []string{"<tool_call>"}, closeTag: "</tool_call>"}

// Name implements Parser.
func (Hermes) Name() string { return "hermes" }

// Parse implements Parser.
func (Hermes) Parse(text string) (string, []Call, bool) { return parse(hermesFormat, text) }

// Stream implements Parser.
func (Hermes) Stream() *Stream { return newStream(hermesFormat) }

// Markers implements Parser.
func (Hermes) Markers() []string { return []string{"<tool_call>", "</tool_call>"} }

func (Hermes) idStyle() idStyle { return idOpenAI }

// Constraint implements Parser: each call as Qwen's template writes it in the
// history, `<tool_call>\n{...}\n</tool_call>`, calls joined by a newline.
func (Hermes) Constraint(tools []Tool, parallel bool) Constraint {
	return Constraint{JSONSchema: callSchema(tools, "arguments"), Prefix: "<tool_call>\n", Suffix: "\n</tool_call>",
		Repeat: parallel, Separator: "\n"}
}

// Llama3 is Llama 3.1-3.3's JSON format: the reply is `{"name": "f", "parameters":
// {...}}`, optionally after `<|python_tag|>`; several calls are joined by ";"
// (as vLLM's llama3_json parser reads them), though Meta's template renders only one.
type Llama3 struct{}

var llamaFormat = format{markers: []string{"<|python_tag|>", "{"}, atStart: true, sep: ";"}

// Name implements Parser.
func (Llama3) Name() string { return "llama3_json" }

// Parse implements Parser.
func (Llama3) Parse(text string) (string, []Call, bool) { return parse(llamaFormat, text) }

// Stream implements Parser.
func (Llama3) Stream() *Stream { return newStream(llamaFormat) }

// Markers implements Parser.
func (Llama3) Markers() []string { return []string{"<|python_tag|>"} }

func (Llama3) idStyle() idStyle { return idOpenAI }

// Constraint implements Parser: one call, as the template writes it. Meta's
// template refuses an assistant turn of several calls, so parallel calls are not
// asked of the model even when allowed.
func (Llama3) Constraint(tools []Tool, _ bool) Constraint {
	return Constraint{JSONSchema: callSchema(tools, "parameters")}
}

// Mistral is the format of Mistral's tool-calling models: `[TOOL_CALLS]` then a
// JSON list of `{"name": "f", "arguments": {...}}`.
type Mistral struct{}

var mistralFormat = format{markers: []string{"[TOOL_CALLS]"}, list: true}

// Name implements Parser.
func (Mistral) Name() string { return "mistral" }

// Parse implements Parser.
func (Mistral) Parse(text string) (string, []Call, bool) { return parse(mistralFormat, text) }

// Stream implements Parser.
func (Mistral) Stream() *Stream { return newStream(mistralFormat) }

// Markers implements Parser.
func (Mistral) Markers() []string { return []string{"[TOOL_CALLS]"} }

func (Mistral) idStyle() idStyle { return idMistral }

// Constraint implements Parser: the list as the template writes it,
// `[TOOL_CALLS][{...}, {...}]`. One call is an object between the list's brackets
// (no array keywords needed); several are an array of at least one call, since
// the constraint's Prefix and Suffix wrap each repeated part, not the whole list.
func (Mistral) Constraint(tools []Tool, parallel bool) Constraint {
	if !parallel {
		return Constraint{JSONSchema: callSchema(tools, "arguments"), Prefix: "[TOOL_CALLS][", Suffix: "]"}
	}
	return Constraint{JSONSchema: `{"type":"array","items":` + callSchema(tools, "arguments") + `,"minItems":1}`,
		Prefix: "[TOOL_CALLS]"}
}

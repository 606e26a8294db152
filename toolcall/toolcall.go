package toolcall

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
)

// Tool is a function the client offers the model.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments object; empty means any object.
	Parameters json.RawMessage
}

// Call is a call the model wrote.
type Call struct {
	Name string
	// Arguments is the arguments object as the model wrote it (JSON text; decoded
	// and compacted when the model wrote it as a JSON string).
	Arguments string
}

// Parser reads one family's call format.
type Parser interface {
	// Name is the parser's name, as --tool-call-parser takes it.
	Name() string
	// Parse splits a whole reply into its content (the text around the calls,
	// trimmed) and its calls. ok is false when the reply starts a call it does not finish
	// in the family's format; the caller then returns the whole text as content.
	Parse(text string) (content string, calls []Call, ok bool)
	// Constraint is the text a reply made only of calls of tools must be.
	Constraint(tools []Tool, parallel bool) Constraint
	// Stream returns a streaming reader of replies in this format.
	Stream() *Stream
	// Markers are the texts that start or end a call; a tokenizer that has them
	// as control tokens must render them as text for the parser to see them.
	Markers() []string
	// idStyle is the shape of call id this family's template accepts back.
	idStyle() idStyle
}

// Constraint mirrors engine.Constraint: Prefix, one JSON value valid against
// JSONSchema, Suffix; with Repeat one or more such parts joined by Separator.
type Constraint struct {
	JSONSchema     string
	Prefix, Suffix string
	Repeat         bool
	Separator      string
}

// Names are the parsers' names.
var Names = []string{"hermes", "llama3_json", "mistral"}

// ByName returns the parser called name.
func ByName(name string) (Parser, error) {
	switch name {
	case "hermes":
		return Hermes{}, nil
	case "llama3_json":
		return Llama3{}, nil
	case "mistral":
		return Mistral{}, nil
	}
	return nil, fmt.Errorf("toolcall: unknown parser %q; known: %s", name, strings.Join(Names, ", "))
}

// Detect names the family a chat template's source writes tool calls in, and
// whether it recognised one; a template that shows none gets Hermes, the format
// most open models are tuned on.
func Detect(template string) (Parser, bool) {
	switch {
	case strings.Contains(template, "<tool_call>"):
		return Hermes{}, true
	case strings.Contains(template, "[TOOL_CALLS]"):
		return Mistral{}, true
	case strings.Contains(template, `"parameters": `) && strings.Contains(template, "<|start_header_id|>"):
		return Llama3{}, true
	}
	return Hermes{}, false
}

type idStyle int

const (
	idOpenAI  idStyle = iota // call_ and 24 alphanumerics
	idMistral                // 9 alphanumerics, as Mistral's templates check
)

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// NewID is a fresh id for a call written by p's family, one its template accepts
// when the call comes back in the history.
func NewID(p Parser) string {
	n, pre := 24, "call_"
	if p.idStyle() == idMistral {
		n, pre = 9, ""
	}
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return pre + string(b)
}

// callSchema is the schema of one call object: the name one of the tools', the
// arguments (under argsKey) valid against that tool's parameters.
func callSchema(tools []Tool, argsKey string) string {
	var alts []string
	for _, t := range tools {
		params := bytes.TrimSpace(t.Parameters)
		if len(params) == 0 || bytes.Equal(params, []byte("null")) {
			params = []byte(`{"type":"object"}`)
		}
		name, _ := json.Marshal(t.Name)
		alts = append(alts, fmt.Sprintf(
			`{"type":"object","properties":{"name":{"const":%s},%q:%s},"required":["name",%q],"additionalProperties":false}`,
			name, argsKey, params, argsKey))
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return `{"anyOf":[` + strings.Join(alts, ",") + `]}`
}

// rawCall is a call object as the families write it.
type rawCall struct {
	Name       *string         `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	Parameters json.RawMessage `json:"parameters"`
}

// decodeCall reads one call object; args is "arguments" or "parameters", the key
// the family uses (the other is accepted too, as models mix them up).
func decodeCall(b []byte) (Call, bool) {
	var r rawCall
	if err := json.Unmarshal(b, &r); err != nil || r.Name == nil || *r.Name == "" {
		return Call{}, false
	}
	args := r.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = r.Parameters
	}
	args = bytes.TrimSpace(args)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = []byte("{}")
	}
	if args[0] == '"' {
		// Some models write the arguments as a JSON string holding the object.
		var s string
		if json.Unmarshal(args, &s) != nil || !json.Valid([]byte(s)) {
			return Call{}, false
		}
		args = []byte(s)
	}
	if args[0] != '{' {
		return Call{}, false
	}
	var buf bytes.Buffer
	if json.Compact(&buf, args) != nil {
		return Call{}, false
	}
	return Call{Name: *r.Name, Arguments: buf.String()}, true
}

// firstMarker is the index of the first of markers in text, or -1.
func firstMarker(text string, markers []string) int {
	best := -1
	for _, m := range markers {
		if i := strings.Index(text, m); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best
}

// heldBack is how many bytes at the end of text could be the start of a marker.
func heldBack(text string, markers []string) int {
	n := 0
	for _, m := range markers {
		for k := min(len(m)-1, len(text)); k > n; k-- {
			if strings.HasSuffix(text, m[:k]) {
				n = k
				break
			}
		}
	}
	return n
}

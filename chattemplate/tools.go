package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ardanlabs/jinja"
)

// ToolCall is a call an assistant turn made, as Hugging Face templates read it:
// {"id", "type": "function", "function": {"name", "arguments"}} with the arguments
// an object, not the JSON text OpenAI sends.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage // a JSON object
}

// maxJSONDepth bounds the nesting of a tool's schema or a call's arguments given
// to a template: the library prints values by recursion.
const maxJSONDepth = 64

// jsonValue converts JSON text to a template value, keeping the order of object
// keys as Python's json.loads does (the library's own conversion sorts them), so
// that tojson writes a tool's schema as the client sent it.
func jsonValue(raw []byte) (jinja.Value, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	v, err := decodeValue(d, 0)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return jinja.Value{}, errors.New("chattemplate: text after the JSON value")
	}
	return v, nil
}

func decodeValue(d *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Value{}, fmt.Errorf("chattemplate: JSON nested more than %d deep", maxJSONDepth)
	}
	tok, err := d.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			out := jinja.NewDict()
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				v, err := decodeValue(d, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				out.AsDict().Set(k.(string), v)
			}
			_, err := d.Token()
			return out, err
		case '[':
			var items []jinja.Value
			for d.More() {
				v, err := decodeValue(d, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := d.Token()
			return jinja.NewList(items), err
		}
		return jinja.Value{}, fmt.Errorf("chattemplate: unexpected %v", t)
	default:
		return jinja.FromGoValue(tok), nil
	}
}

// toolCallsValue is an assistant turn's calls as templates read them.
func toolCallsValue(calls []ToolCall) (jinja.Value, error) {
	items := make([]jinja.Value, len(calls))
	for i, c := range calls {
		args, err := jsonValue(c.Arguments)
		if err != nil {
			return jinja.Value{}, fmt.Errorf("chattemplate: tool call %d's arguments: %w", i, err)
		}
		fn := jinja.NewDict()
		fn.AsDict().Set("name", jinja.NewString(c.Name))
		fn.AsDict().Set("arguments", args)
		call := jinja.NewDict()
		call.AsDict().Set("id", jinja.NewString(c.ID))
		call.AsDict().Set("type", jinja.NewString("function"))
		call.AsDict().Set("function", fn)
		items[i] = call
	}
	return jinja.NewList(items), nil
}

// toolsValue is the tools as templates read them: each {"type": "function",
// "function": {...}} as the client sent it.
func toolsValue(tools []json.RawMessage) (jinja.Value, error) {
	if tools == nil {
		return jinja.None(), nil
	}
	items := make([]jinja.Value, len(tools))
	for i, t := range tools {
		v, err := jsonValue(t)
		if err != nil {
			return jinja.Value{}, fmt.Errorf("chattemplate: tool %d: %w", i, err)
		}
		items[i] = v
	}
	return jinja.NewList(items), nil
}

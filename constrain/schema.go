package constrain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// SchemaError is a schema outside the supported subset, or not a schema at all.
type SchemaError struct {
	Keyword string // the JSON Schema keyword at fault, "" when the text is not JSON
	Path    string // JSON pointer to the schema object holding it
	Msg     string
}

func (e *SchemaError) Error() string {
	if e.Keyword == "" {
		return "json schema: " + e.Msg
	}
	return fmt.Sprintf("json schema: keyword %q at %q: %s", e.Keyword, pathOr(e.Path), e.Msg)
}

func pathOr(p string) string {
	if p == "" {
		return "#"
	}
	return "#" + p
}

// Limits keep a compiled grammar small and a parse's stack shallow.
const (
	maxSchemaDepth = 64
	maxBound       = 1000 // largest maxLength, maxItems or minItems compiled
)

// annotations are keywords that do not constrain a value.
var annotations = map[string]bool{"title": true, "description": true, "default": true, "examples": true,
	"$schema": true, "$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true}

// keywords are the constraining keywords the compiler understands.
var keywords = map[string]bool{"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "anyOf": true, "oneOf": true, "minItems": true, "maxItems": true,
	"minLength": true, "maxLength": true, "$ref": true}

// obj is a JSON object with its keys in document order, which sets the order
// properties are generated in.
type obj struct {
	keys []string
	vals []any
}

func (o *obj) get(k string) (any, bool) {
	for i, key := range o.keys {
		if key == k {
			return o.vals[i], true
		}
	}
	return nil, false
}

// parseJSON decodes text keeping object key order; numbers stay json.Number.
func parseJSON(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("text after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > 2*maxSchemaDepth {
		return nil, fmt.Errorf("nested deeper than %d", 2*maxSchemaDepth)
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		o := &obj{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			o.keys = append(o.keys, k.(string))
			o.vals = append(o.vals, v)
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := decodeValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token()
		return a, err
	}
	return t, nil
}

// encodeJSON writes v compactly, keys in their order.
func encodeJSON(buf *bytes.Buffer, v any) {
	switch v := v.(type) {
	case *obj:
		buf.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			encodeString(buf, k)
			buf.WriteByte(':')
			encodeJSON(buf, v.vals[i])
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			encodeJSON(buf, x)
		}
		buf.WriteByte(']')
	case string:
		encodeString(buf, v)
	case json.Number:
		buf.WriteString(v.String())
	case bool:
		buf.WriteString(strconv.FormatBool(v))
	default:
		buf.WriteString("null")
	}
}

func encodeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	buf.Truncate(buf.Len() - 1) // Encode's newline
}

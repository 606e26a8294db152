package frontend

import (
	"bytes"
	"encoding/json"

	"github.com/tandem-serve/tandem/constrain"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// responseFormatField is OpenAI's response_format: "text", "json_object", or
// "json_schema" with the schema to follow.
type responseFormatField struct {
	Type       string            `json:"type"`
	JSONSchema *jsonSchemaFormat `json:"json_schema"`
}

type jsonSchemaFormat struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	// Strict is accepted either way: the schema is always enforced.
	Strict *bool `json:"strict"`
}

// jsonObjectSchema is what response_format json_object enforces: any object.
const jsonObjectSchema = `{"type":"object"}`

// constraintOf turns a response format into the worker's constraint; nil is free text.
func constraintOf(typ string, schema json.RawMessage) (*workerv1.Constraint, error) {
	switch typ {
	case "", "text":
		return nil, nil
	case "json_object":
		return &workerv1.Constraint{JsonSchema: jsonObjectSchema}, nil
	case "json_schema":
		s := bytes.TrimSpace(schema)
		if len(s) == 0 || bytes.Equal(s, []byte("null")) {
			return nil, invalidField("response_format", "response_format.json_schema.schema is required with type \"json_schema\"")
		}
		return &workerv1.Constraint{JsonSchema: string(s)}, nil
	}
	return nil, invalidField("response_format", "response_format type %q is not supported; want \"text\", \"json_object\" or \"json_schema\"", typ)
}

func (r *responseFormatField) constraint() (*workerv1.Constraint, error) {
	if r == nil {
		return nil, nil
	}
	var schema json.RawMessage
	if r.JSONSchema != nil {
		schema = r.JSONSchema.Schema
	} else if r.Type == "json_schema" {
		return nil, invalidField("response_format", "response_format.json_schema is required with type \"json_schema\"")
	}
	return constraintOf(r.Type, schema)
}

// constraintCacheSize is how many distinct constraints the frontend keeps compiled.
const constraintCacheSize = 256

// checkConstraint compiles c (once per distinct constraint) so that a schema
// outside the supported subset is a 400 naming the keyword and the field it came
// from (response_format, or tools for an enforced tool call), before any worker
// sees it.
func (f *Frontend) checkConstraint(c *workerv1.Constraint, field string) error {
	if c == nil {
		return nil
	}
	_, err := f.constraints.Grammar(constrain.Spec{JSONSchema: c.GetJsonSchema(), Prefix: c.GetPrefix(),
		Suffix: c.GetSuffix(), Repeat: c.GetRepeat(), Separator: c.GetSeparator()})
	if err != nil {
		f.metrics.constraints.WithLabelValues("refused").Inc()
		f.log.Info("constraint refused", "field", field, "error", err)
		return invalidField(field, "%s: %v", field, err)
	}
	f.metrics.constraints.WithLabelValues("accepted").Inc()
	return nil
}

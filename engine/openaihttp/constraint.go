package openaihttp

import (
	"encoding/json"

	"github.com/tandem-serve/tandem/engine"
)

// StructuredOutputs is vLLM's structured_outputs (StructuredOutputsParams,
// vllm/sampling_params.py, v0.12 and later; guided_json before).
type StructuredOutputs struct {
	JSON json.RawMessage `json:"json,omitempty"`
	// StructuralTag is an XGrammar structural tag, as JSON text.
	StructuralTag string `json:"structural_tag,omitempty"`
}

// ResponseFormat is the response_format SGLang's and TensorRT-LLM's completions
// take: TensorRT-LLM's {"type":"json","schema":...}, and both engines' XGrammar
// structural tag {"type":"structural_tag","format":...}.
type ResponseFormat struct {
	Type   string          `json:"type"`
	Schema json.RawMessage `json:"schema,omitempty"`
	Format json.RawMessage `json:"format,omitempty"`
}

// Plain reports whether c is a JSON schema alone, which every engine takes in its
// JSON field; a prefix, suffix or repetition needs a structural tag.
func Plain(c *engine.Constraint) bool {
	return c.Prefix == "" && c.Suffix == "" && !c.Repeat
}

// SchemaJSON is c's schema as JSON ("" is any value, as tandem's constrain reads it).
func SchemaJSON(c *engine.Constraint) json.RawMessage {
	if c.JSONSchema == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(c.JSONSchema)
}

// structuralFormat is c as an XGrammar structural tag's format (XGrammar 0.1.25
// and later, docs/tutorials/structural_tag.md): the schema in a tag between the
// prefix and the suffix, repeated with tags_with_separator (at least one, no
// stop after the first) when c repeats.
type structuralFormat struct {
	Type       string             `json:"type"`
	Begin      *string            `json:"begin,omitempty"`
	Content    *structuralFormat  `json:"content,omitempty"`
	End        *string            `json:"end,omitempty"`
	JSONSchema json.RawMessage    `json:"json_schema,omitempty"`
	Tags       []structuralFormat `json:"tags,omitempty"`
	Separator  *string            `json:"separator,omitempty"`
	AtLeastOne *bool              `json:"at_least_one,omitempty"`
	StopAfter  *bool              `json:"stop_after_first,omitempty"`
}

// StructuralTagFormat is c as the format of an XGrammar structural tag.
func StructuralTagFormat(c *engine.Constraint) json.RawMessage {
	tag := structuralFormat{Type: "tag", Begin: &c.Prefix, End: &c.Suffix,
		Content: &structuralFormat{Type: "json_schema", JSONSchema: SchemaJSON(c)}}
	f := tag
	if c.Repeat {
		yes, no := true, false
		f = structuralFormat{Type: "tags_with_separator", Tags: []structuralFormat{tag}, Separator: &c.Separator, AtLeastOne: &yes, StopAfter: &no}
	}
	b, _ := json.Marshal(f) // cannot fail: a schema that is not JSON fails when the body is encoded
	return b
}

// StructuralTag is c as a whole XGrammar structural tag, {"type":"structural_tag","format":...}.
func StructuralTag(c *engine.Constraint) json.RawMessage {
	b, _ := json.Marshal(ResponseFormat{Type: "structural_tag", Format: StructuralTagFormat(c)})
	return b
}

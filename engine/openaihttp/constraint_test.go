package openaihttp_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/openaihttp"
	"github.com/tandem-serve/tandem/internal/testutil"
	"github.com/tandem-serve/tandem/internal/testutil/fakeengine"
)

// A constraint reaches each GPU engine in its own field: a plain schema in its JSON
// field, a prefix/suffix/repeat as an XGrammar structural tag.
func TestConstraintBody(t *testing.T) {
	schema := `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`
	schemaAny := map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "integer"}}, "required": []any{"a"}}
	tag := map[string]any{"type": "tags_with_separator", "separator": "\n", "at_least_one": true, "stop_after_first": false,
		"tags": []any{map[string]any{"type": "tag", "begin": "<tool_call>\n", "end": "\n</tool_call>",
			"content": map[string]any{"type": "json_schema", "json_schema": schemaAny}}}}
	plain := &engine.Constraint{JSONSchema: schema}
	calls := &engine.Constraint{JSONSchema: schema, Prefix: "<tool_call>\n", Suffix: "\n</tool_call>", Repeat: true, Separator: "\n"}
	for _, tc := range []struct {
		kind  fakeengine.Kind
		c     *engine.Constraint
		field string
		want  func(v any) bool
	}{
		{fakeengine.VLLM, plain, "structured_outputs", func(v any) bool {
			return reflect.DeepEqual(v, map[string]any{"json": schemaAny})
		}},
		{fakeengine.VLLM, calls, "structured_outputs", func(v any) bool {
			m, _ := v.(map[string]any)
			var got map[string]any
			s, _ := m["structural_tag"].(string)
			return json.Unmarshal([]byte(s), &got) == nil && got["type"] == "structural_tag" && reflect.DeepEqual(got["format"], tag)
		}},
		{fakeengine.SGLang, plain, "json_schema", func(v any) bool {
			var got any
			s, _ := v.(string)
			return json.Unmarshal([]byte(s), &got) == nil && reflect.DeepEqual(got, schemaAny)
		}},
		{fakeengine.SGLang, calls, "response_format", func(v any) bool {
			return reflect.DeepEqual(v, map[string]any{"type": "structural_tag", "format": tag})
		}},
		{fakeengine.TRTLLM, plain, "response_format", func(v any) bool {
			return reflect.DeepEqual(v, map[string]any{"type": "json", "schema": schemaAny})
		}},
		{fakeengine.TRTLLM, calls, "response_format", func(v any) bool {
			return reflect.DeepEqual(v, map[string]any{"type": "structural_tag", "format": tag})
		}},
	} {
		t.Run(string(tc.kind)+"/"+tc.field, func(t *testing.T) {
			f := (&fakeengine.Server{Kind: tc.kind, TokenIDs: true}).Start(t)
			e := connect(t, f, openaihttp.TokenAuto)
			s, err := e.Generate(t.Context(), engine.Request{ID: "req-1", Prompt: []uint32{1, 2, 3}, MaxTokens: 4,
				Sampling: engine.Sampling{Temperature: 0.5, Constraint: tc.c}})
			if err != nil {
				t.Fatal(err)
			}
			testutil.Drain(t, t.Context(), s)
			reqs := f.Completions()
			var body map[string]any
			if err := json.Unmarshal(reqs[len(reqs)-1].Body, &body); err != nil {
				t.Fatal(err)
			}
			if !tc.want(body[tc.field]) {
				t.Errorf("%s = %#v in\n%s", tc.field, body[tc.field], reqs[len(reqs)-1].Body)
			}
			for _, other := range []string{"structured_outputs", "json_schema", "response_format"} {
				if _, ok := body[other]; ok && other != tc.field {
					t.Errorf("%s also set: %s", other, reqs[len(reqs)-1].Body)
				}
			}
		})
	}
}

package toolcall

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       Parser
		text    string
		content string
		calls   []Call
		ok      bool
	}{
		{"hermes one", Hermes{}, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			"", []Call{{"get_weather", `{"city": "Paris"}`}}, true},
		{"hermes content first", Hermes{}, "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
			"Let me look.", []Call{{"f", `{}`}}, true},
		{"hermes parallel", Hermes{}, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"arguments\": {\"y\": [1, {\"z\": \"}\"}]}, \"name\": \"b\"}\n</tool_call>",
			"", []Call{{"a", `{"x": 1}`}, {"b", `{"y": [1, {"z": "}"}]}`}}, true},
		{"hermes no close tag", Hermes{}, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"a\\\"b\"}}",
			"", []Call{{"f", `{"q": "a\"b"}`}}, true},
		{"hermes string arguments", Hermes{}, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
			"", []Call{{"f", `{"a":1}`}}, true},
		{"hermes plain", Hermes{}, "Paris is sunny. a < b", "Paris is sunny. a < b", nil, true},
		{"hermes malformed", Hermes{}, "ok <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>",
			"ok <tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>", nil, false},
		{"hermes unfinished", Hermes{}, "<tool_call>\n{\"name\": \"f\", \"argu", "<tool_call>\n{\"name\": \"f\", \"argu", nil, false},
		{"hermes no name", Hermes{}, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", nil, false},
		{"llama", Llama3{}, `{"name": "get_weather", "parameters": {"city": "Paris"}}`, "", []Call{{"get_weather", `{"city": "Paris"}`}}, true},
		{"llama python tag", Llama3{}, `<|python_tag|>{"name": "f", "parameters": {}}`, "", []Call{{"f", `{}`}}, true},
		{"llama two", Llama3{}, ` {"name": "a", "parameters": {}}; {"name": "b", "parameters": {"k": true}}`, "",
			[]Call{{"a", `{}`}, {"b", `{"k": true}`}}, true},
		{"llama text", Llama3{}, `The answer is {"name": 1}`, `The answer is {"name": 1}`, nil, true},
		{"llama malformed", Llama3{}, `{"name": "f", "parameters": [}`, `{"name": "f", "parameters": [}`, nil, false},
		{"llama not a call", Llama3{}, `{"city": "Paris"}`, `{"city": "Paris"}`, nil, false},
		{"mistral", Mistral{}, `[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}, "id": "abcdefghi"}]`, "",
			[]Call{{"a", `{"x": 1}`}, {"b", `{}`}}, true},
		{"mistral spaced", Mistral{}, "Sure. [TOOL_CALLS] [ {\"name\": \"a\", \"arguments\": {}} ]", "Sure.", []Call{{"a", `{}`}}, true},
		{"mistral bad", Mistral{}, `[TOOL_CALLS]nope`, `[TOOL_CALLS]nope`, nil, false},
		{"mistral marker only", Mistral{}, `[TOOL_CALLS]`, `[TOOL_CALLS]`, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content, calls, ok := tc.p.Parse(tc.text)
			if content != tc.content || !slices.Equal(calls, tc.calls) || ok != tc.ok {
				t.Errorf("Parse(%q) = %q, %v, %v; want %q, %v, %v", tc.text, content, calls, ok, tc.content, tc.calls, tc.ok)
			}
			// Streamed one byte at a time, the same content and calls come out, and the
			// argument fragments join to the arguments.
			got := streamBytes(tc.p, tc.text)
			if tc.ok && (got.content != strings.TrimSpace(tc.content) && len(tc.calls) > 0 || !slices.Equal(got.calls, tc.calls)) {
				t.Errorf("streamed: content %q calls %v; want %q %v", got.content, got.calls, tc.content, tc.calls)
			}
			if !tc.ok && !got.failed {
				t.Errorf("streamed: no failure reported")
			}
			if len(tc.calls) == 0 && got.content != tc.text {
				t.Errorf("streamed content %q, want the whole text %q", got.content, tc.text)
			}
		})
	}
}

type streamed struct {
	content string
	calls   []Call
	failed  bool
}

// streamBytes feeds text to p's stream one byte at a time and rebuilds what a
// client would from the events.
func streamBytes(p Parser, text string) streamed {
	s := p.Stream()
	var evs []Event
	for i := range len(text) {
		evs = append(evs, s.Push(text[i:i+1])...)
	}
	evs = append(evs, s.Close()...)
	var out streamed
	for _, e := range evs {
		if !e.IsCall {
			out.content += e.Content
			continue
		}
		if e.Name != "" {
			out.calls = append(out.calls, Call{Name: e.Name})
		}
		if len(out.calls) > 0 && e.Index == len(out.calls)-1 {
			out.calls[e.Index].Arguments += e.Args
		}
	}
	for i := range out.calls {
		out.calls[i].Arguments = strings.TrimSpace(out.calls[i].Arguments)
	}
	out.failed = s.Failed()
	if out.failed {
		// A failed call's fragments may have gone out; only complete calls count.
		out.calls = out.calls[:len(s.Calls())]
	}
	return out
}

func TestStreamHoldsBackMarkerStart(t *testing.T) {
	s := Hermes{}.Stream()
	if evs := s.Push("Hello <tool"); len(evs) != 1 || evs[0].Content != "Hello" {
		t.Fatalf("Push = %+v; want only \"Hello\" sent, the possible marker held", evs)
	}
	if evs := s.Push("box> x"); len(evs) != 1 || evs[0].Content != " <toolbox> x" {
		t.Fatalf("Push = %+v; want the held text sent once it is not a marker", evs)
	}
	s = Hermes{}.Stream()
	s.Push("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Pa")
	evs := s.Push("ris\"}}")
	if len(evs) != 1 || evs[0].Args != `ris"}` {
		t.Fatalf("Push = %+v; want the arguments streamed as written", evs)
	}
}

func TestDetect(t *testing.T) {
	for file, want := range map[string]string{
		"qwen2.5-instruct.jinja": "hermes", "qwen3.jinja": "hermes", "llama-3.1-instruct.jinja": "llama3_json",
		"mistral-nemo-instruct-2407.jinja": "mistral", "zephyr.jinja": "",
	} {
		p, ok := Detect(readTemplate(t, file))
		if name := p.Name(); ok && name != want || !ok && want != "" {
			t.Errorf("Detect(%s) = %s, %v; want %q", file, name, ok, want)
		}
	}
}

// TestConstraintParsesBack writes, for each family, a reply that obeys the
// constraint (one and two calls) and checks that the parser reads the calls back.
func TestConstraintParsesBack(t *testing.T) {
	tools := []Tool{{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)},
		{Name: "now"}}
	calls := []Call{{"get_weather", `{"city":"Paris"}`}, {"now", `{}`}}
	for _, p := range []Parser{Hermes{}, Llama3{}, Mistral{}} {
		for _, parallel := range []bool{false, true} {
			c := p.Constraint(tools, parallel)
			var schema any
			if err := json.Unmarshal([]byte(c.JSONSchema), &schema); err != nil {
				t.Fatalf("%s: schema is not JSON: %v", p.Name(), err)
			}
			want := calls[:1]
			if parallel && (c.Repeat || strings.Contains(c.JSONSchema, `"type":"array"`)) {
				want = calls
			}
			text := obeying(t, p, c, want)
			_, got, ok := p.Parse(text)
			if !ok || !slices.Equal(got, want) {
				t.Errorf("%s parallel=%v: %q parsed as %v, %v; want %v", p.Name(), parallel, text, got, ok, want)
			}
		}
	}
}

// obeying is the text a constrained decoder could write for calls under c.
func obeying(t *testing.T, p Parser, c Constraint, calls []Call) string {
	t.Helper()
	key := "arguments"
	if p.Name() == "llama3_json" {
		key = "parameters"
	}
	var objs []string
	for _, call := range calls {
		objs = append(objs, `{"name":"`+call.Name+`","`+key+`":`+call.Arguments+`}`)
	}
	if strings.Contains(c.JSONSchema, `"type":"array"`) {
		return c.Prefix + "[" + strings.Join(objs, ",") + "]" + c.Suffix
	}
	if len(objs) > 1 && !c.Repeat {
		t.Fatalf("%s: several calls without Repeat", p.Name())
	}
	var parts []string
	for _, o := range objs {
		parts = append(parts, c.Prefix+o+c.Suffix)
	}
	return strings.Join(parts, c.Separator)
}

func TestConstraintShape(t *testing.T) {
	tools := []Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}, {Name: "g"}}
	c := Hermes{}.Constraint(tools, true)
	want := Constraint{
		JSONSchema: `{"anyOf":[{"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object"}},"required":["name","arguments"],"additionalProperties":false},` +
			`{"type":"object","properties":{"name":{"const":"g"},"arguments":{"type":"object"}},"required":["name","arguments"],"additionalProperties":false}]}`,
		Prefix: "<tool_call>\n", Suffix: "\n</tool_call>", Repeat: true, Separator: "\n"}
	if c != want {
		t.Errorf("Hermes constraint =\n%+v\nwant\n%+v", c, want)
	}
	if c := (Llama3{}).Constraint(tools[:1], true); c.Prefix != "" || c.Repeat ||
		c.JSONSchema != `{"type":"object","properties":{"name":{"const":"f"},"parameters":{"type":"object"}},"required":["name","parameters"],"additionalProperties":false}` {
		t.Errorf("Llama 3 constraint = %+v", c)
	}
	if c := (Mistral{}).Constraint(tools[:1], false); c.Prefix != "[TOOL_CALLS][" || c.Suffix != "]" || c.Repeat {
		t.Errorf("Mistral constraint = %+v", c)
	}
}

func TestNewID(t *testing.T) {
	if id := NewID(Hermes{}); !strings.HasPrefix(id, "call_") || len(id) != 29 {
		t.Errorf("NewID(hermes) = %q", id)
	}
	if id := NewID(Mistral{}); len(id) != 9 || strings.Trim(id, alnum) != "" {
		t.Errorf("NewID(mistral) = %q; want 9 alphanumerics", id)
	}
}

func TestByName(t *testing.T) {
	for _, n := range Names {
		if p, err := ByName(n); err != nil || p.Name() != n {
			t.Errorf("ByName(%q) = %v, %v", n, p, err)
		}
	}
	if _, err := ByName("qwen"); err == nil || !strings.Contains(err.Error(), "hermes") {
		t.Errorf("ByName(qwen) = %v; want an error listing the parsers", err)
	}
}

// TestConstraintMatchesTemplates checks each family's constraint against what its
// model's template writes for a call in the history (testdata of chattemplate,
// rendered by Jinja2): the prefix starts the assistant's reply, and a call the
// constraint allows is written between prefix and suffix as the template writes it.
func TestConstraintMatchesTemplates(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "chattemplate", "testdata", "tool_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Name string `json:"name"`
			Want string `json:"want"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	tools := []Tool{{Name: "get_weather"}}
	for _, tc := range []struct {
		template, afterPrompt string
		p                     Parser
		call                  string
	}{
		{"qwen2.5-instruct/round_trip", "<|im_start|>assistant\n", Hermes{}, `{"name": "get_weather", "arguments": {"city": "Paris"}}`},
		{"qwen3/round_trip", "<|im_start|>assistant\n", Hermes{}, `{"name": "get_weather", "arguments": {"city": "Paris"}}`},
		{"llama-3.1-instruct/round_trip", "<|start_header_id|>assistant<|end_header_id|>\n\n", Llama3{}, `{"name": "get_weather", "parameters": {"city": "Paris"}}`},
		{"mistral-nemo-instruct-2407/round_trip", "[/INST]", Mistral{}, `{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"}`},
	} {
		i := slices.IndexFunc(file.Cases, func(c struct {
			Name string `json:"name"`
			Want string `json:"want"`
		}) bool {
			return c.Name == tc.template
		})
		if i < 0 {
			t.Fatalf("no case %s", tc.template)
		}
		c := tc.p.Constraint(tools, false)
		if want := tc.afterPrompt + c.Prefix + tc.call + c.Suffix; !strings.Contains(file.Cases[i].Want, want) {
			t.Errorf("%s: the template does not write %q", tc.template, want)
		}
		_, calls, ok := tc.p.Parse(c.Prefix + tc.call + c.Suffix)
		if !ok || len(calls) != 1 || calls[0].Name != "get_weather" || calls[0].Arguments != `{"city": "Paris"}` {
			t.Errorf("%s: the template's call parses as %v, %v", tc.template, calls, ok)
		}
	}
}

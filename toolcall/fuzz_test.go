package toolcall

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

func readTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "chattemplate", "testdata", "templates", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// FuzzParse checks, for every family, that any reply parses without panicking,
// that calls carry a name and an arguments object, that a failure returns the
// text whole, and that streaming in two pieces gives the calls Parse gives.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"]}\"]}}\n</tool_call>",
		"hi <tool_call>{\"name\":\"f\",\"arguments\":\"{}\"}</tool_call><tool_call>{\"name\":\"g\"}",
		`<|python_tag|>{"name": "f", "parameters": {"x": null}}; {"name": "g", "parameters": {}}`,
		`[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"k": "v"}}]`,
		`{"name": "f", "parameters": 3}`, "[TOOL_CALLS] {", "<tool_call>", "",
	} {
		f.Add(s, uint8(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, text string, cut uint8) {
		for _, p := range []Parser{Hermes{}, Llama3{}, Mistral{}} {
			content, calls, ok := p.Parse(text)
			if !ok && (content != text || calls != nil) {
				t.Fatalf("%s: a failure returned %q, %v, not the text whole", p.Name(), content, calls)
			}
			for _, c := range calls {
				var obj map[string]any
				if c.Name == "" || json.Unmarshal([]byte(c.Arguments), &obj) != nil {
					t.Fatalf("%s: call %+v has no name or its arguments are not an object", p.Name(), c)
				}
			}
			k := min(int(cut), len(text))
			s := p.Stream()
			s.Push(text[:k])
			s.Push(text[k:])
			s.Close()
			if s.Failed() != !ok {
				t.Fatalf("%s: streamed failure %v, Parse ok %v", p.Name(), s.Failed(), ok)
			}
			if ok && len(s.Calls()) != len(calls) {
				t.Fatalf("%s: streamed %d calls, Parse %d", p.Name(), len(s.Calls()), len(calls))
			}
			if utf8.ValidString(text) && !utf8.ValidString(content) {
				t.Fatalf("%s: content %q is not valid UTF-8", p.Name(), content)
			}
		}
	})
}

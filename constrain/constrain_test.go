package constrain

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// testVocab is every single byte plus some multi-byte tokens, like a real BPE
// vocabulary; id 0 has no bytes (a special token).
func testVocab() *Vocabulary {
	toks := [][]byte{nil}
	for c := 0; c < 256; c++ {
		toks = append(toks, []byte{byte(c)})
	}
	for _, s := range []string{`{"`, `":`, `",`, `"}`, ` "`, `name`, `age`, `true`, `false`, `null`, `12`, `00`, `é`, `  `, `{}`, `[]`, `"a"`, `,"`, `\n`, "\n"} {
		toks = append(toks, []byte(s))
	}
	return NewVocabulary(toks)
}

// generate draws allowed tokens at random until the text is final, or complete
// and a coin says stop; it fails the test on an empty mask.
func generate(t testing.TB, m *Matcher, v *Vocabulary, rng *rand.Rand, maxTokens int) (string, bool) {
	var out strings.Builder
	for range maxTokens {
		if m.Final() || m.Complete() && rng.IntN(4) == 0 {
			return out.String(), true
		}
		mask := m.Mask()
		var allowed []uint32
		for id := range v.Size() {
			if Allowed(mask, uint32(id)) {
				allowed = append(allowed, uint32(id))
			}
		}
		if len(allowed) == 0 {
			t.Fatalf("empty mask after %q", out.String())
		}
		tok := allowed[rng.IntN(len(allowed))]
		if !m.Accepts(tok) || !m.Advance(tok) {
			t.Fatalf("mask allows %q after %q but the matcher refuses it", v.Bytes(tok), out.String())
		}
		out.Write(v.Bytes(tok))
	}
	return out.String(), false
}

type person struct {
	Name    string   `json:"name"`
	Age     int      `json:"age"`
	Tags    []string `json:"tags"`
	Kind    string   `json:"kind"`
	Married *bool    `json:"married"`
}

const personSchema = `{"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":8},
  "age":{"type":"integer"},
  "tags":{"type":"array","items":{"type":"string","maxLength":3},"minItems":1,"maxItems":3},
  "kind":{"enum":["cat","dog"]},
  "married":{"type":["boolean","null"]}},
  "required":["name","age","tags","kind"],"additionalProperties":false}`

func TestRandomWalksValidate(t *testing.T) {
	g, err := Compile(Spec{JSONSchema: personSchema})
	if err != nil {
		t.Fatal(err)
	}
	v := testVocab()
	a := NewAutomaton(g, v)
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		text, ok := generate(t, a.NewMatcher(), v, rng, 400)
		if !ok {
			continue
		}
		var p person
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("seed %d: %q: %v", seed, text, err)
		}
		if n := len([]rune(p.Name)); n < 1 || n > 8 || len(p.Tags) < 1 || len(p.Tags) > 3 || (p.Kind != "cat" && p.Kind != "dog") {
			t.Fatalf("seed %d: %q breaks the schema", seed, text)
		}
		if i := strings.Index(text, `"age"`); i < strings.Index(text, `"name"`) {
			t.Fatalf("seed %d: %q: properties out of order", seed, text)
		}
	}
}

func TestPrefixSuffixRepeat(t *testing.T) {
	spec := Spec{JSONSchema: `{"anyOf":[{"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},"required":["name","arguments"]}]}`,
		Prefix: "<tool_call>\n", Suffix: "\n</tool_call>", Repeat: true, Separator: "\n"}
	g, err := Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	v := testVocab()
	a := NewAutomaton(g, v)
	for seed := range 100 {
		text, ok := generate(t, a.NewMatcher(), v, rand.New(rand.NewPCG(uint64(seed), 2)), 600)
		if !ok {
			continue
		}
		for _, part := range strings.Split(text, "\n</tool_call>") {
			if part == "" {
				continue
			}
			body := strings.TrimPrefix(strings.TrimPrefix(part, "\n"), "<tool_call>\n")
			var call struct {
				Name      string         `json:"name"`
				Arguments map[string]int `json:"arguments"`
			}
			if err := json.Unmarshal([]byte(body), &call); err != nil || call.Name != "f" {
				t.Fatalf("seed %d: part %q of %q: %v", seed, body, text, err)
			}
		}
	}
	m := a.NewMatcher()
	if m.Complete() || !m.AdvanceBytes([]byte(`<tool_call>
{"name":"f","arguments":{"x":1}}
</tool_call>`)) || !m.Complete() || m.Final() {
		t.Fatal("a whole call is not complete, or allows no second call")
	}
	if m.AdvanceBytes([]byte("x")) {
		t.Fatal("text after the call was accepted")
	}
}

func TestFinalEndsText(t *testing.T) {
	g, err := Compile(Spec{JSONSchema: `{"const":{"a":[1,true]}}`})
	if err != nil {
		t.Fatal(err)
	}
	m := NewAutomaton(g, testVocab()).NewMatcher()
	if !m.AdvanceBytes([]byte(` {"a":[1,true]}`)) || !m.Final() {
		t.Fatal("the const is not final")
	}
}

func TestRefusedKeywords(t *testing.T) {
	for schema, kw := range map[string]string{
		`{"type":"string","pattern":"a+"}`:                        "pattern",
		`{"type":"integer","minimum":0}`:                          "minimum",
		`{"properties":{"a":{"format":"date"}}}`:                  "format",
		`{"type":"thing"}`:                                        "type",
		`{"$ref":"http://x"}`:                                     "$ref",
		`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`: "$ref",
		`{"type":"string","maxLength":100000}`:                    "maxLength",
		`{"allOf":[{}]}`:                                          "allOf",
	} {
		_, err := Compile(Spec{JSONSchema: schema})
		var se *SchemaError
		if !errors.As(err, &se) || se.Keyword != kw {
			t.Errorf("%s: got %v, want an error naming %q", schema, err, kw)
		}
	}
	if _, err := Compile(Spec{JSONSchema: `{"type":`}); err == nil {
		t.Error("broken JSON compiled")
	}
}

func TestRecursiveRef(t *testing.T) {
	g, err := Compile(Spec{JSONSchema: `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}},"$ref":"#/$defs/node"}`})
	if err != nil {
		t.Fatal(err)
	}
	m := NewAutomaton(g, testVocab()).NewMatcher()
	if !m.AdvanceBytes([]byte(`{"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]}`)) || !m.Complete() {
		t.Fatal("a valid tree was refused")
	}
}

func TestCacheSharesAutomaton(t *testing.T) {
	c := NewCache(testVocab(), 2)
	a1, err := c.Automaton(Spec{JSONSchema: `{"type":"object"}`})
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := c.Automaton(Spec{JSONSchema: `{"type":"object"}`})
	if a1 != a2 {
		t.Fatal("the same spec compiled twice")
	}
	if _, err := c.Automaton(Spec{JSONSchema: `{"type":"string","pattern":"x"}`}); err == nil {
		t.Fatal("a refused schema came back compiled")
	}
}

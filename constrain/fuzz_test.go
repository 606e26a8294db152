package constrain

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

func FuzzCompile(f *testing.F) {
	for _, s := range []string{personSchema, `{}`, `true`, `{"type":["string","null"],"maxLength":3}`,
		`{"anyOf":[{"const":1},{"enum":["a",null]}]}`, `{"$ref":"#"}`, `{"items":{"$ref":"#"}}`,
		`{"additionalProperties":{"type":"number"}}`, `{"required":["x"]}`} {
		f.Add(s, uint64(1))
	}
	v := testVocab()
	f.Fuzz(func(t *testing.T, schema string, seed uint64) {
		g, err := Compile(Spec{JSONSchema: schema})
		if err != nil {
			return
		}
		// Whatever compiles must give masks the matcher agrees with, and complete
		// text that is JSON.
		text, ok := generate(t, NewAutomaton(g, v).NewMatcher(), v, rand.New(rand.NewPCG(seed, 3)), 64)
		if ok && !json.Valid([]byte(text)) {
			t.Fatalf("%s: complete text %q is not JSON", schema, text)
		}
	})
}

func FuzzMatcher(f *testing.F) {
	for _, s := range []string{`{"name":"ab","age":3,"tags":["x"],"kind":"cat"}`, ` {"name":"\u00e9\n","age":-0,"tags":[],"kind":"dog","married":null}`, `{"name":"é"`} {
		f.Add(s)
	}
	g, err := Compile(Spec{JSONSchema: personSchema})
	if err != nil {
		f.Fatal(err)
	}
	a := NewAutomaton(g, testVocab())
	f.Fuzz(func(t *testing.T, text string) {
		m := a.NewMatcher()
		if !m.AdvanceBytes([]byte(text)) || !m.Complete() {
			return
		}
		var p person
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil || p.Name == "" || len(p.Tags) == 0 {
			t.Fatalf("%q was accepted whole but breaks the schema: %v", text, err)
		}
	})
}

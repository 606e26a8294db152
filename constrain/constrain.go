// Package constrain enforces structured outputs by constrained decoding: a JSON
// Schema (within a supported subset) between literal text is compiled into a
// byte-level pushdown automaton, and a per-sequence Matcher tells which tokens of a
// vocabulary may come next.
//
// The approach is llama.cpp's grammars (a state is a set of stacks of grammar
// positions, advanced one byte at a time) made lazy-deterministic the way XGrammar
// and llguidance make it cheap: states are interned, the transition on each byte is
// computed once and kept, the token mask of a state is computed once (walking a
// trie of the vocabulary's tokens, pruning a subtree as soon as its prefix dies) and
// kept, and a caller checks the token it sampled first (a few byte transitions) and
// needs the whole mask only when that token is refused. Inside a string or a number
// most steps land on a state already seen, so the mask is a lookup.
//
// Supported JSON Schema: type (object, array, string, number, integer, boolean,
// null, or an array of them), properties, required, additionalProperties,
// items, enum, const, anyOf, oneOf (treated as anyOf), minItems, maxItems,
// minLength, maxLength, $ref to "#", "#/$defs/NAME" or "#/definitions/NAME", and
// annotations that constrain nothing (title, description, default, examples, ...).
// Any other keyword is refused with a SchemaError naming it.
//
// The text generated is compact JSON with at most one space between tokens (no
// newlines), properties in a fixed order (required ones as properties declares
// them, then optional ones), no property beyond those declared, and numbers of at
// most 16 integer digits, 16 fraction digits and 3 exponent digits: every value
// the automaton allows ends, so a model cannot pad or count forever.
package constrain

import (
	"errors"
	"fmt"
)

// Spec is what a constrained text must be: Prefix, one JSON value valid against
// JSONSchema, Suffix; with Repeat, one or more such parts joined by Separator.
// An empty JSONSchema allows any JSON value.
type Spec struct {
	JSONSchema     string
	Prefix, Suffix string
	Repeat         bool
	Separator      string
}

// Grammar is a compiled Spec, independent of any vocabulary.
type Grammar struct {
	spec Spec
	g    *grammar
}

// Compile checks spec's schema against the supported subset and compiles it.
func Compile(spec Spec) (*Grammar, error) {
	text := spec.JSONSchema
	if text == "" {
		text = "{}"
	}
	root, err := parseJSON(text)
	if err != nil {
		return nil, &SchemaError{Msg: "not valid JSON: " + err.Error()}
	}
	c := newCompiler(root)
	value, err := c.schema(root, "", 0)
	if err != nil {
		return nil, err
	}
	if c.b.size > maxGrammarItems {
		return nil, &SchemaError{Msg: fmt.Sprintf("compiles to a grammar of %d items, above the %d supported (lower maxLength or maxItems)", c.b.size, maxGrammarItems)}
	}
	b := c.b
	var lead []item
	if spec.Prefix == "" {
		lead = c.ws // a leading space, as many tokenizers spell the first word
	}
	part := seq(b.lit(spec.Prefix), lead, one(b.ref(value)), b.lit(spec.Suffix))
	root32 := b.rule(part)
	if spec.Repeat {
		root32 = b.rule(seq(part, one(b.ref(b.star(seq(b.lit(spec.Separator), part))))))
	}
	if spec.Repeat && spec.Separator == "" && spec.Prefix == "" && spec.Suffix == "" {
		return nil, errors.New("constraint: a repeated part needs a prefix, suffix or separator to tell the parts apart")
	}
	return &Grammar{spec: spec, g: b.build(root32)}, nil
}

// Spec is the constraint g was compiled from.
func (g *Grammar) Spec() Spec { return g.spec }

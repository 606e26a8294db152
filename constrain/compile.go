package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// compiler turns a parsed schema into grammar rules.
type compiler struct {
	b        *builder
	root     any
	refs     map[string]int32 // $ref target -> its rule, declared before it is compiled
	head     map[string]bool  // $refs entered since the last consumed byte (a cycle among them never ends)
	ws       []item           // optional whitespace
	anyRule  int32            // any JSON value, built on first use
	str      int32            // any JSON string
	char     []item           // one character of a string's content
	num, int int32
}

func newCompiler(root any) *compiler {
	c := &compiler{b: newBuilder(), root: root, refs: map[string]int32{}, head: map[string]bool{}, anyRule: -1}
	b := c.b
	// At most one space between tokens: a model that favours spaces cannot pad
	// forever, and compact JSON is what every parser reads.
	c.ws = one(b.ref(b.rule(nil, b.lit(" "))))
	cont := b.ranges(0x80, 0xBF)
	char := b.rule(
		one(b.ranges(0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7F)), // printable ASCII but '"' and '\\'
		seq(b.lit(`\`), one(b.ranges('"', '"', '\\', '\\', '/', '/', 'b', 'b', 'f', 'f', 'n', 'n', 'r', 'r', 't', 't'))),
		seq(b.lit(`\u`), c.hex4()),
		[]item{b.ranges(0xC2, 0xDF), cont},
		[]item{b.ranges(0xE0, 0xE0), b.ranges(0xA0, 0xBF), cont},
		[]item{b.ranges(0xE1, 0xEC, 0xEE, 0xEF), cont, cont},
		[]item{b.ranges(0xED, 0xED), b.ranges(0x80, 0x9F), cont},
		[]item{b.ranges(0xF0, 0xF0), b.ranges(0x90, 0xBF), cont, cont},
		[]item{b.ranges(0xF1, 0xF3), cont, cont, cont},
		[]item{b.ranges(0xF4, 0xF4), b.ranges(0x80, 0x8F), cont, cont},
	)
	c.char = one(b.ref(char))
	c.str = b.rule(seq(b.lit(`"`), one(b.ref(b.star(c.char))), b.lit(`"`)))
	// Numbers have bounded digits (16 integer and fraction digits, 3 of exponent),
	// so that a number, too, must end.
	digit := b.ranges('0', '9')
	intPart := b.rule(b.lit("0"), seq(one(b.ranges('1', '9')), one(b.ref(b.repeat(one(digit), nil, 0, 15)))))
	c.int = b.rule(seq(one(b.ref(b.rule(nil, b.lit("-")))), one(b.ref(intPart))))
	frac := b.rule(nil, seq(b.lit("."), one(b.ref(b.repeat(one(digit), nil, 1, 16)))))
	exp := b.rule(nil, seq(one(b.ranges('e', 'e', 'E', 'E')), one(b.ref(b.rule(nil, one(b.ranges('+', '+', '-', '-'))))),
		one(b.ref(b.repeat(one(digit), nil, 1, 3)))))
	c.num = b.rule([]item{b.ref(c.int), b.ref(frac), b.ref(exp)})
	return c
}

func (c *compiler) hex4() []item {
	h := c.b.ranges('0', '9', 'a', 'f', 'A', 'F')
	return []item{h, h, h, h}
}

func (c *compiler) anyValue() int32 {
	if c.anyRule >= 0 {
		return c.anyRule
	}
	b := c.b
	c.anyRule = b.declare()
	v := one(b.ref(c.anyRule))
	b.define(c.anyRule, one(b.ref(c.objectOf(v))), one(b.ref(c.arrayOf(v, 0, -1))), one(b.ref(c.str)),
		one(b.ref(c.num)), b.lit("true"), b.lit("false"), b.lit("null"))
	return c.anyRule
}

// objectOf is any object whose values match value.
func (c *compiler) objectOf(value []item) int32 {
	b := c.b
	kv := seq(one(b.ref(c.str)), c.ws, b.lit(":"), c.ws, value, c.ws)
	return b.rule(seq(b.lit("{"), c.ws, b.lit("}")),
		seq(b.lit("{"), c.ws, one(b.ref(b.repeat(kv, seq(b.lit(","), c.ws), 1, -1))), b.lit("}")))
}

func (c *compiler) arrayOf(elt []item, lo, hi int) int32 {
	b := c.b
	var alts [][]item
	if lo == 0 {
		alts = append(alts, seq(b.lit("["), c.ws, b.lit("]")))
	}
	if hi != 0 {
		alts = append(alts, seq(b.lit("["), c.ws, one(b.ref(b.repeat(elt, seq(c.ws, b.lit(","), c.ws), max(lo, 1), hi))), c.ws, b.lit("]")))
	}
	return b.rule(alts...)
}

func fail(kw, path, format string, args ...any) error {
	return &SchemaError{Keyword: kw, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// schema compiles s (found at path) into a rule.
func (c *compiler) schema(s any, path string, depth int) (int32, error) {
	if depth > maxSchemaDepth {
		return 0, fail("", path, "schema nested deeper than %d", maxSchemaDepth)
	}
	switch s := s.(type) {
	case bool:
		if !s {
			return 0, &SchemaError{Path: path, Msg: "the schema false allows no value"}
		}
		return c.anyValue(), nil
	case *obj:
		return c.object(s, path, depth)
	}
	return 0, &SchemaError{Path: path, Msg: "a schema must be an object or a boolean"}
}

func (c *compiler) object(s *obj, path string, depth int) (int32, error) {
	for _, k := range s.keys {
		if !keywords[k] && !annotations[k] {
			return 0, fail(k, path, "not supported (supported: %s)", supportedList())
		}
	}
	b := c.b
	if r, ok := s.get("$ref"); ok {
		for _, k := range s.keys {
			if keywords[k] && k != "$ref" {
				return 0, fail(k, path, "not supported beside $ref")
			}
		}
		return c.ref(r, path, depth)
	}
	if v, ok := s.get("const"); ok {
		return b.rule(b.lit(encoded(v))), nil
	}
	if v, ok := s.get("enum"); ok {
		vals, ok := v.([]any)
		if !ok || len(vals) == 0 {
			return 0, fail("enum", path, "want a non-empty array")
		}
		var alts [][]item
		for _, x := range vals {
			alts = append(alts, b.lit(encoded(x)))
		}
		return b.rule(alts...), nil
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		v, ok := s.get(kw)
		if !ok {
			continue
		}
		subs, ok := v.([]any)
		if !ok || len(subs) == 0 {
			return 0, fail(kw, path, "want a non-empty array of schemas")
		}
		for _, k := range s.keys {
			if keywords[k] && k != kw {
				return 0, fail(k, path, "not supported beside %s (move it into each alternative)", kw)
			}
		}
		var alts [][]item
		for i, sub := range subs {
			r, err := c.schema(sub, fmt.Sprintf("%s/%s/%d", path, kw, i), depth+1)
			if err != nil {
				return 0, err
			}
			alts = append(alts, one(b.ref(r)))
		}
		return b.rule(alts...), nil
	}
	types, err := typesOf(s, path)
	if err != nil {
		return 0, err
	}
	var alts [][]item
	for _, t := range types {
		r, err := c.typed(t, s, path, depth)
		if err != nil {
			return 0, err
		}
		alts = append(alts, one(b.ref(r)))
	}
	return b.rule(alts...), nil
}

func encoded(v any) string {
	var buf bytes.Buffer
	encodeJSON(&buf, v)
	return buf.String()
}

var typeNames = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

// typesOf is the types s allows: its type keyword, or what its keywords imply.
func typesOf(s *obj, path string) ([]string, error) {
	v, ok := s.get("type")
	if !ok {
		_, props := s.get("properties")
		_, addl := s.get("additionalProperties")
		_, items := s.get("items")
		switch {
		case props || addl:
			return []string{"object"}, nil
		case items:
			return []string{"array"}, nil
		}
		return []string{"any"}, nil
	}
	var names []string
	switch v := v.(type) {
	case string:
		names = []string{v}
	case []any:
		for _, x := range v {
			n, ok := x.(string)
			if !ok {
				return nil, fail("type", path, "want a type name or an array of them")
			}
			names = append(names, n)
		}
	default:
		return nil, fail("type", path, "want a type name or an array of them")
	}
	if len(names) == 0 {
		return nil, fail("type", path, "empty array of types")
	}
	for _, n := range names {
		if !contains(typeNames, n) {
			return nil, fail("type", path, "unknown type %q (want one of %s)", n, strings.Join(typeNames, ", "))
		}
	}
	return names, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (c *compiler) typed(t string, s *obj, path string, depth int) (int32, error) {
	b := c.b
	switch t {
	case "any":
		return c.anyValue(), nil
	case "string":
		lo, hi, err := bounds(s, path, "minLength", "maxLength")
		if err != nil {
			return 0, err
		}
		if lo == 0 && hi < 0 {
			return c.str, nil
		}
		return b.rule(seq(b.lit(`"`), one(b.ref(b.repeat(c.char, nil, lo, hi))), b.lit(`"`))), nil
	case "number":
		return c.num, nil
	case "integer":
		return c.int, nil
	case "boolean":
		return b.rule(b.lit("true"), b.lit("false")), nil
	case "null":
		return b.rule(b.lit("null")), nil
	case "array":
		lo, hi, err := bounds(s, path, "minItems", "maxItems")
		if err != nil {
			return 0, err
		}
		saved := c.head
		c.head = map[string]bool{}
		defer func() { c.head = saved }()
		it := c.anyRuleItem()
		if items, ok := s.get("items"); ok {
			r, err := c.schema(items, path+"/items", depth+1)
			if err != nil {
				return 0, err
			}
			it = one(b.ref(r))
		}
		return c.arrayOf(it, lo, hi), nil
	}
	return c.properties(s, path, depth)
}

func (c *compiler) anyRuleItem() []item { return one(c.b.ref(c.anyValue())) }

// bounds reads a pair of count keywords; hi is -1 when unbounded.
func bounds(s *obj, path, minKW, maxKW string) (lo, hi int, err error) {
	hi = -1
	if v, ok := s.get(minKW); ok {
		if lo, err = count(v, path, minKW); err != nil {
			return 0, 0, err
		}
	}
	if v, ok := s.get(maxKW); ok {
		if hi, err = count(v, path, maxKW); err != nil {
			return 0, 0, err
		}
		if hi < lo {
			return 0, 0, fail(maxKW, path, "%d is below %s %d", hi, minKW, lo)
		}
	}
	return lo, hi, nil
}

func count(v any, path, kw string) (int, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fail(kw, path, "want a non-negative integer")
	}
	i, err := n.Int64()
	if err != nil || i < 0 {
		return 0, fail(kw, path, "want a non-negative integer, got %s", n)
	}
	if i > maxBound {
		return 0, fail(kw, path, "%d is above the largest bound supported, %d", i, maxBound)
	}
	return int(i), nil
}

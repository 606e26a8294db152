package constrain

import (
	"strings"
)

// properties compiles an object schema. Properties come in a fixed order, as
// llama.cpp's json-schema-to-grammar emits them: the required ones in the order
// properties declares them, then the optional ones in that order, each optional
// one present or not. No other property is generated (a valid value whatever
// additionalProperties says). Without properties, any keys are allowed, with
// values matching additionalProperties.
func (c *compiler) properties(s *obj, path string, depth int) (int32, error) {
	b := c.b
	saved := c.head
	c.head = map[string]bool{}
	defer func() { c.head = saved }()
	var required []string
	if v, ok := s.get("required"); ok {
		list, ok := v.([]any)
		if !ok {
			return 0, fail("required", path, "want an array of property names")
		}
		for _, x := range list {
			n, ok := x.(string)
			if !ok {
				return 0, fail("required", path, "want an array of property names")
			}
			if !contains(required, n) {
				required = append(required, n)
			}
		}
	}
	pv, hasProps := s.get("properties")
	if !hasProps && len(required) == 0 {
		value := c.anyRuleItem()
		if a, ok := s.get("additionalProperties"); ok {
			if _, isBool := a.(bool); !isBool {
				r, err := c.schema(a, path+"/additionalProperties", depth+1)
				if err != nil {
					return 0, err
				}
				value = one(b.ref(r))
			} else if a == false {
				return b.rule(seq(b.lit("{"), c.ws, b.lit("}"))), nil
			}
		}
		return c.objectOf(value), nil
	}
	props := &obj{}
	if hasProps {
		var ok bool
		if props, ok = pv.(*obj); !ok {
			return 0, fail("properties", path, "want an object of schemas")
		}
	}
	type prop struct {
		kv       []item
		required bool
	}
	var order []prop
	add := func(name string, req bool) error {
		value := c.anyRuleItem()
		if sub, ok := props.get(name); ok {
			r, err := c.schema(sub, path+"/properties/"+escapePointer(name), depth+1)
			if err != nil {
				return err
			}
			value = one(b.ref(r))
		}
		order = append(order, prop{kv: seq(b.lit(encoded(name)), c.ws, b.lit(":"), c.ws, value, c.ws), required: req})
		return nil
	}
	for _, n := range required {
		if err := add(n, true); err != nil {
			return 0, err
		}
	}
	for _, n := range props.keys {
		if !contains(required, n) {
			if err := add(n, false); err != nil {
				return 0, err
			}
		}
	}
	// first(i): properties i.. when none has been written yet; more(i): after one
	// has (each then needs its comma).
	comma := seq(b.lit(","), c.ws)
	first, more := b.rule(nil), b.rule(nil)
	for i := len(order) - 1; i >= 0; i-- {
		p := order[i]
		f := b.rule(seq(p.kv, one(b.ref(more))))
		m := b.rule(seq(comma, p.kv, one(b.ref(more))))
		if !p.required {
			b.define(f, one(b.ref(first)))
			b.define(m, one(b.ref(more)))
		}
		first, more = f, m
	}
	return b.rule(seq(b.lit("{"), c.ws, one(b.ref(first)), b.lit("}"))), nil
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// ref compiles a $ref to the root ("#") or to a schema under $defs or
// definitions; a target is compiled once, so recursive schemas work.
func (c *compiler) ref(v any, path string, depth int) (int32, error) {
	target, ok := v.(string)
	if !ok {
		return 0, fail("$ref", path, "want a string")
	}
	if r, ok := c.refs[target]; ok {
		if c.head[target] {
			return 0, fail("$ref", path, "%q refers back to itself before any text is generated", target)
		}
		return r, nil
	}
	var sub any
	switch {
	case target == "#":
		sub = c.root
	case strings.HasPrefix(target, "#/$defs/"), strings.HasPrefix(target, "#/definitions/"):
		parts := strings.SplitN(target[2:], "/", 2)
		root, ok := c.root.(*obj)
		if !ok {
			return 0, fail("$ref", path, "%q: the root schema has no %s", target, parts[0])
		}
		defs, _ := root.get(parts[0])
		d, ok := defs.(*obj)
		if ok {
			sub, ok = d.get(unescapePointer(parts[1]))
		}
		if !ok {
			return 0, fail("$ref", path, "%q names no schema", target)
		}
	default:
		return 0, fail("$ref", path, "%q: only #, #/$defs/NAME and #/definitions/NAME are supported", target)
	}
	r := c.b.declare()
	c.refs[target] = r
	c.head[target] = true
	body, err := c.schema(sub, target[1:], depth+1)
	delete(c.head, target)
	if err != nil {
		return 0, err
	}
	c.b.define(r, one(c.b.ref(body)))
	return r, nil
}

func supportedList() string {
	return "type, properties, required, additionalProperties, items, enum, const, anyOf, oneOf, " +
		"minItems, maxItems, minLength, maxLength, $ref to #/$defs or #/definitions, and annotations " +
		"(title, description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly)"
}

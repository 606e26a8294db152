package chattemplate

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// New does not hand a template to the library as written; rewrite gives it a
// source of the same meaning in which the library's gaps cannot show:
//
//   - Whitespace control. The library's {%- and -%}, trim_blocks and lstrip_blocks
//     act on the nearest text even across other tags: `Effort: {{ x }}{%- endif %}`
//     loses the space after the colon, which Jinja keeps (GLM's template). Jinja
//     also drops the template's final newline and turns "\r\n" into "\n"; the
//     library does neither. rewrite applies Jinja's rules itself, then writes every
//     text as an expression `{{ "text" }}` and drops the signs and the comments, so
//     that no text is left for the library to trim.
//   - String literals. Jinja decodes Python's escapes ('\x41', '\u00e9', '\r');
//     the library only \n, \t, \\, \' and \". rewrite re-encodes each literal.
//   - A closer inside brackets: Jinja reads {{ {'a': {'b': 1}} }} as one tag, the
//     library ends it at the first "}}". rewrite writes "} }" there.
//   - dict(a=1, b=2) and namespace(...): the library builds them from a Go map,
//     in random key order; rewrite calls __tandem_dict("a", 1, "b", 2) instead.
//   - Bounds. The library has no hook inside a loop or a macro, so the top of every
//     loop body gets {{ __tandem_step() }}, every macro body is framed by
//     {{ __tandem_enter() }} ... {{ __tandem_leave() }}, and every set is followed
//     by {{ __tandem_assigned(...) }} (see budget); the methods that mutate in
//     place are renamed away (see mutators).
//
// The rewritten source keeps every newline of the template on its line, so the
// line numbers of the library's errors are the template's.
const (
	guardPrefix = "__tandem_"
	guardStep   = guardPrefix + "step"
	guardEnter  = guardPrefix + "enter"
	guardLeave  = guardPrefix + "leave"
	// guardAssigned(name) follows every `set name = value`, and
	// guardAssigned(ns, "attr") every `set ns.attr = value`; see budget.assigned.
	guardAssigned = guardPrefix + "assigned"
	// guardUnsafe prefixes the name of a method that mutates; see mutators.
	// guardDict builds dict(...) and namespace(...); see writeKeywordCall.
	guardDict   = guardPrefix + "dict"
	guardUnsafe = guardPrefix + "unsafe_"
)

// normalizeNewlines does what Jinja's lexer does first: "\r\n" and "\r" become
// "\n", and one newline at the very end is dropped (keep_trailing_newline=False).
func normalizeNewlines(src string) string {
	if strings.ContainsRune(src, '\r') {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

// rewrite returns the source New compiles (see above); src is normalized. Every
// newline of src stays in the result, on the same line as in src (whitespace
// control that removes newlines leaves them in a comment), so the line numbers of
// the library's errors are those of the template as written.
func rewrite(src string, tags []tag) string {
	var sb strings.Builder
	sb.Grow(len(src) + len(src)/4)
	lineStarting := true // Jinja's line_starting: the last token ended a line
	gapStart := 0        // where the text after the previous tag begins
	keepStart := 0       // and where it begins once that tag's right side trimmed it
	for k := 0; k < len(tags); k++ {
		t := tags[k]
		text := leftTrim(src[keepStart:t.start], t, lineStarting)
		writeDropped(&sb, src[gapStart:keepStart])
		writeText(&sb, text)
		writeDropped(&sb, src[keepStart+len(text):t.start])

		if t.kind == '%' && t.keyword == "raw" {
			end := k + 1
			for end < len(tags) && !(tags[end].kind == '%' && tags[end].keyword == "endraw") {
				end++
			}
			if end < len(tags) {
				writeRaw(&sb, src, t, tags[end])
				k, t = end, tags[end]
			} else {
				writeTag(&sb, t) // the library reports the unclosed raw block
			}
		} else {
			writeTag(&sb, t)
		}

		gapStart, keepStart = t.end, t.end
		switch {
		case t.right == '-':
			keepStart += len(src[t.end:]) - len(strings.TrimLeftFunc(src[t.end:], isSpace))
		case t.kind != '{' && t.right != '+' && strings.HasPrefix(src[t.end:], "\n"):
			keepStart++ // trim_blocks
		}
		lineStarting = keepStart > t.end && src[keepStart-1] == '\n'
	}
	writeDropped(&sb, src[gapStart:keepStart])
	writeText(&sb, src[keepStart:])
	return sb.String()
}

// writeRaw writes what lies between {% raw %} and {% endraw %} as text: Jinja does
// not read it. The raw tag takes no newline after it (Jinja's raw_begin has no
// trim_blocks suffix), only whitespace when it ends with "-%}".
func writeRaw(sb *strings.Builder, src string, raw, endraw tag) {
	writeDropped(sb, src[raw.start:raw.end])
	body := src[raw.end:endraw.start]
	lineStarting := false
	if raw.right == '-' {
		trimmed := strings.TrimLeftFunc(body, isSpace)
		writeDropped(sb, body[:len(body)-len(trimmed)])
		lineStarting = len(trimmed) < len(body) && body[len(body)-len(trimmed)-1] == '\n'
		body = trimmed
	}
	kept := leftTrim(body, endraw, lineStarting)
	writeText(sb, kept)
	writeDropped(sb, body[len(kept):])
	writeDropped(sb, src[endraw.start:endraw.end])
}

// writeDropped keeps the newlines of text that whitespace control removed, in a
// comment, so that the lines after it keep their numbers.
func writeDropped(sb *strings.Builder, dropped string) {
	if n := strings.Count(dropped, "\n"); n > 0 {
		sb.WriteString("{#")
		sb.WriteString(strings.Repeat("\n", n))
		sb.WriteString("#}")
	}
}

// leftTrim applies the whitespace control on the left of t to the text before it.
func leftTrim(text string, t tag, lineStarting bool) string {
	switch {
	case t.left == '-':
		return strings.TrimRightFunc(text, isSpace)
	case t.left == '+' || t.kind == '{':
		return text
	}
	// lstrip_blocks: the indentation before a statement or comment that starts its
	// line goes.
	lpos := strings.LastIndexByte(text, '\n') + 1
	if lpos > 0 || lineStarting {
		if rest := text[lpos:]; rest != "" && strings.TrimLeftFunc(rest, isSpace) == "" {
			return text[:lpos]
		}
	}
	return text
}

// writeText writes text as an expression printing it.
func writeText(sb *strings.Builder, text string) {
	if text == "" {
		return
	}
	sb.WriteString(`{{ "`)
	writeLiteralBody(sb, text, false)
	sb.WriteString(`" }}`)
}

// writeLiteralBody writes s inside a double-quoted literal as the library reads
// one. Backslash and quote are escaped; so is a newline when escapeNewlines, for
// a literal that must not add a line.
func writeLiteralBody(sb *strings.Builder, s string, escapeNewlines bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\', '"':
			sb.WriteByte('\\')
		case '\n':
			if escapeNewlines {
				sb.WriteString(`\n`)
				continue
			}
		}
		sb.WriteByte(s[i])
	}
}

// writeTag writes t without its signs, its string literals re-encoded, and the
// guard calls around loop and macro bodies. Comments vanish.
func writeTag(sb *strings.Builder, t tag) {
	switch t.kind {
	case '#':
		writeDropped(sb, t.content)
		return
	case '{':
		sb.WriteString("{{")
		writeCode(sb, t.content)
		sb.WriteString("}}")
		return
	}
	if t.keyword == "endmacro" {
		sb.WriteString("{{ " + guardLeave + "() }}")
	}
	sb.WriteString("{%")
	writeCode(sb, t.content)
	sb.WriteString("%}")
	switch t.keyword {
	case "for":
		sb.WriteString("{{ " + guardStep + "() }}")
	case "macro":
		sb.WriteString("{{ " + guardEnter + "() }}")
	case "set":
		switch name, attr := setTarget(t.content); {
		case name == "":
		case attr == "":
			sb.WriteString("{{ " + guardAssigned + "(" + name + ") }}")
		default:
			sb.WriteString("{{ " + guardAssigned + "(" + name + `, "`)
			writeLiteralBody(sb, attr, true)
			sb.WriteString(`") }}`)
		}
	}
}

// setTarget is what `set name = value` or `set name.attr = value` assigns to; ""
// for a block set, which assigns a string, and for targets the library would not
// find again.
func setTarget(content string) (name, attr string) {
	target, _, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(content), "set"), "=")
	if !ok {
		return "", ""
	}
	name, attr, _ = strings.Cut(strings.TrimSpace(target), ".")
	if !isIdentifier(name) {
		return "", ""
	}
	return name, attr
}

func isIdentifier(s string) bool {
	return s != "" && identEnd(s, 0) == len(s)
}

// mutators are the library's methods that change a list or dict in place.
// transformers' sandbox refuses them; here they would let a template build a
// value that contains itself, whose printing recurses until the Go stack
// overflows, which no recover catches. writeCode renames them to names no value
// has, so a call fails as a call of an undefined method. What is left to put a
// value inside another is `set`, which budget.assigned checks.
var mutators = map[string]bool{"append": true, "pop": true, "insert": true, "update": true}

// writeCode writes the inside of a tag with its string literals decoded as Python
// does and re-encoded for the library, "}}" split outside strings, the mutating
// methods renamed (see mutators) and dict(...) and namespace(...) calls made to
// keep the order of their arguments (see writeKeywordCall).
func writeCode(sb *strings.Builder, code string) {
	for i := 0; i < len(code); {
		c := code[i]
		switch {
		case c == '\'' || c == '"':
			end := skipString(code, i)
			if end < 0 {
				end = len(code) // scanTags would have refused it
			}
			body := code[i+1 : max(i+1, end-1)]
			sb.WriteByte('"')
			writeLiteralBody(sb, decodePyEscapes(body), true)
			sb.WriteByte('"')
			// The literal's own lines, as whitespace between tokens.
			sb.WriteString(strings.Repeat("\n", strings.Count(body, "\n")))
			i = end
		case c == '}' && i+1 < len(code) && code[i+1] == '}':
			sb.WriteString("} ")
			i++
		case c == '.':
			j := skipSpace(code, i+1)
			k := identEnd(code, j)
			sb.WriteString(code[i:j])
			if mutators[code[j:k]] {
				sb.WriteString(guardUnsafe)
			}
			sb.WriteString(code[j:k])
			i = k
		case isIdentStart(c):
			k := identEnd(code, i)
			if word := code[i:k]; word == "dict" || word == "namespace" {
				if end := writeKeywordCall(sb, code, k); end > 0 {
					i = end
					continue
				}
			}
			sb.WriteString(code[i:k])
			i = k
		default:
			sb.WriteByte(c)
			i++
		}
	}
}

// writeKeywordCall rewrites dict(a=x, b=y) or namespace(a=x, b=y), whose name ends
// at k, as __tandem_dict("a", x, "b", y), and returns the offset past the call; 0
// when the call has positional arguments or is not one. The library builds these
// from a Go map, so their keys come out in random order: tojson(dict(...)) would
// differ from request to request.
func writeKeywordCall(sb *strings.Builder, code string, k int) int {
	open := skipSpace(code, k)
	if open >= len(code) || code[open] != '(' {
		return 0
	}
	var args []string
	depth, start := 0, open+1
	for i := open; i < len(code); i++ {
		switch code[i] {
		case '\'', '"':
			end := skipString(code, i)
			if end < 0 {
				return 0
			}
			i = end - 1
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				args = append(args, code[start:i])
				return writeKeywordArgs(sb, code[k:i+1], args, i+1)
			}
		case ',':
			if depth == 1 {
				args = append(args, code[start:i])
				start = i + 1
			}
		}
	}
	return 0
}

func writeKeywordArgs(sb *strings.Builder, call string, args []string, end int) int {
	var out strings.Builder
	out.WriteString(guardDict + "(")
	for n, arg := range args {
		if strings.TrimSpace(arg) == "" && n == len(args)-1 {
			break // a trailing comma, or no arguments
		}
		j := skipSpace(arg, 0)
		k := identEnd(arg, j)
		eq := skipSpace(arg, k)
		if k == j || eq >= len(arg) || arg[eq] != '=' || (eq+1 < len(arg) && arg[eq+1] == '=') {
			return 0 // positional: leave the call to the library
		}
		if n > 0 {
			out.WriteString(", ")
		}
		out.WriteString(`"` + arg[j:k] + `", `)
		writeCode(&out, arg[eq+1:])
	}
	out.WriteString(")")
	sb.WriteString(out.String())
	// The call's lines, as whitespace after it.
	sb.WriteString(strings.Repeat("\n", max(0, strings.Count(call, "\n")-strings.Count(out.String(), "\n"))))
	return end
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// identEnd is the end of the identifier starting at i (i itself if none does).
func identEnd(s string, i int) int {
	if i >= len(s) || !isIdentStart(s[i]) {
		return i
	}
	for i++; i < len(s) && (isIdentStart(s[i]) || (s[i] >= '0' && s[i] <= '9')); i++ {
	}
	return i
}

// decodePyEscapes decodes the body of a Python string literal as Jinja does
// (unicode-escape): \n \t \r \\ \' \" \a \b \f \v, octal \ooo, \xhh, \uhhhh and
// \Uhhhhhhhh; a backslash before anything else stays, as does \N{name}.
func decodePyEscapes(s string) string {
	if !strings.ContainsRune(s, '\\') {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			sb.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case '\n':
			// a line continuation
		case '\\', '\'', '"':
			sb.WriteByte(c)
		case 'a':
			sb.WriteByte('\a')
		case 'b':
			sb.WriteByte('\b')
		case 'f':
			sb.WriteByte('\f')
		case 'n':
			sb.WriteByte('\n')
		case 'r':
			sb.WriteByte('\r')
		case 't':
			sb.WriteByte('\t')
		case 'v':
			sb.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			if r, ok := hexRune(s[i+1:], n); ok {
				sb.WriteRune(r)
				i += n
			} else {
				sb.WriteByte('\\')
				sb.WriteByte(c)
			}
		case '0', '1', '2', '3', '4', '5', '6', '7':
			r, n := rune(0), 0
			for n < 3 && i+n < len(s) && s[i+n] >= '0' && s[i+n] <= '7' {
				r = r*8 + rune(s[i+n]-'0')
				n++
			}
			sb.WriteRune(r)
			i += n - 1
		default:
			sb.WriteByte('\\')
			sb.WriteByte(c)
		}
	}
	return sb.String()
}

func hexRune(s string, n int) (rune, bool) {
	if len(s) < n {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[:n]) {
		switch {
		case c >= '0' && c <= '9':
			r = r*16 + rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r*16 + rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r*16 + rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	if r > utf8.MaxRune {
		return 0, false
	}
	return r, true
}

// checkTags refuses what the library would misread: a statement without a name
// (the library takes `{% %}` for the end of the template and ignores the rest), and
// nesting deeper than its recursive parser and evaluator can take without
// exhausting the Go stack.
func checkTags(tags []tag) error {
	depth := 0
	for _, t := range tags {
		if t.kind == '%' && t.keyword == "" {
			return fmt.Errorf("line %d, col %d: a statement must start with its name, as {%% if ... %%}", t.line, t.col)
		}
		if t.kind == '%' {
			if opensBlock(t) {
				depth++
			} else if strings.HasPrefix(t.keyword, "end") && depth > 0 {
				depth--
			}
			if depth > maxNesting {
				return fmt.Errorf("line %d, col %d: blocks nested more than %d deep", t.line, t.col, maxNesting)
			}
		}
		b := 0
		for i := 0; i < len(t.content); i++ {
			switch t.content[i] {
			case '\'', '"':
				if end := skipString(t.content, i); end > 0 {
					i = end - 1
				}
			case '(', '[', '{':
				if b++; b > maxNesting {
					return fmt.Errorf("line %d, col %d: brackets nested more than %d deep", t.line, t.col, maxNesting)
				}
			case ')', ']', '}':
				b--
			}
		}
	}
	return nil
}

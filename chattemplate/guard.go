package chattemplate

import (
	"fmt"
	"strings"
	"unicode"
)

// The library runs a template with no hook inside its loops or macros, so a
// template that never ends (a macro calling itself) or runs for hours (loops nested
// over long strings) would hold a request, or crash the process when the Go stack
// overflows. addGuards rewrites the source: the top of every for-loop body gets
// `{{ __tandem_step() }}`, and every macro body is framed by `{{ __tandem_enter() }}`
// and `{{ __tandem_leave() }}`. These print nothing, and the library's whitespace
// control sees through them: an expression tag without "-" trims nothing, and the
// "-", trim_blocks and lstrip_blocks of the neighbouring tags act on the nearest
// text, which the insertion leaves where it was. No newline is added, so the lines
// of the library's errors stay those of the source.
const (
	guardPrefix = "__tandem_"
	guardStep   = guardPrefix + "step"
	guardEnter  = guardPrefix + "enter"
	guardLeave  = guardPrefix + "leave"
)

// tag is one {{ }}, {% %} or {# #} of a template, delimited as the library's
// scanner delimits it.
type tag struct {
	start, end int    // offsets of the opening "{" and just past the closer
	kind       byte   // '{' expression, '%' statement, '#' comment
	keyword    string // a statement's first word
	line, col  int    // 1-based, of the opening "{"
}

// scanTags finds the tags of src. Like the library it skips quoted strings inside
// expressions and statements (a "%}" in a string does not close the tag).
func scanTags(src string) ([]tag, error) {
	var tags []tag
	line, col := 1, 1
	advance := func(i int) {
		if src[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	for i := 0; i < len(src); {
		if src[i] != '{' || i+1 >= len(src) || !strings.ContainsRune("{%#", rune(src[i+1])) {
			advance(i)
			i++
			continue
		}
		t := tag{start: i, kind: src[i+1], line: line, col: col}
		closer := "}}"
		switch t.kind {
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		}
		advance(i)
		advance(i + 1)
		i += 2
		if i < len(src) && src[i] == '-' {
			advance(i)
			i++
		}
		contentStart := i
		contentEnd := -1
		for i < len(src) {
			c := src[i]
			if t.kind != '#' && (c == '\'' || c == '"') {
				advance(i)
				i++
				for i < len(src) && src[i] != c {
					if src[i] == '\\' && i+1 < len(src) {
						advance(i)
						i++
					}
					advance(i)
					i++
				}
				if i < len(src) {
					advance(i)
					i++
				}
				continue
			}
			if c == '-' && i+2 < len(src) && src[i+1] == closer[0] && src[i+2] == closer[1] {
				contentEnd, t.end = i, i+3
				break
			}
			if i+1 < len(src) && c == closer[0] && src[i+1] == closer[1] {
				contentEnd, t.end = i, i+2
				break
			}
			advance(i)
			i++
		}
		if contentEnd < 0 {
			return nil, fmt.Errorf("line %d, col %d: a tag opened here is never closed (no %q)", t.line, t.col, closer)
		}
		for j := i; j < t.end; j++ {
			advance(j)
		}
		i = t.end
		if t.kind == '%' {
			t.keyword = keyword(src[contentStart:contentEnd])
		}
		tags = append(tags, t)
	}
	return tags, nil
}

// keyword is a statement's first word, as the library reads it.
func keyword(text string) string {
	text = strings.TrimSpace(text)
	for i, r := range text {
		if !unicode.IsLetter(r) && r != '_' {
			return text[:i]
		}
	}
	return text
}

// addGuards returns src with the guard calls inserted (see above). Nothing inside
// {% raw %} is touched: the library prints it as written.
func addGuards(src string) (string, error) {
	tags, err := scanTags(src)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	sb.Grow(len(src) + 64)
	last := 0
	inRaw := false
	insert := func(at int, name string) {
		sb.WriteString(src[last:at])
		sb.WriteString("{{ " + name + "() }}")
		last = at
	}
	for _, t := range tags {
		if inRaw {
			inRaw = t.keyword != "endraw"
			continue
		}
		switch t.keyword {
		case "raw":
			inRaw = true
		case "for":
			insert(t.end, guardStep)
		case "macro":
			insert(t.end, guardEnter)
		case "endmacro":
			insert(t.start, guardLeave)
		}
	}
	sb.WriteString(src[last:])
	return sb.String(), nil
}

// blockEnds pairs each statement that opens a block with the one that closes it.
var blockEnds = map[string]string{
	"if": "endif", "for": "endfor", "macro": "endmacro", "call": "endcall",
	"filter": "endfilter", "raw": "endraw", "generation": "endgeneration",
}

// describeSyntaxError adds to a library error the block structure behind it: the
// library says "unclosed for block" without a line, and reports an {% if %} left
// open inside a loop as an unknown {% endfor %}.
func describeSyntaxError(src string, err error) error {
	tags, scanErr := scanTags(src)
	if scanErr != nil {
		return err // the library's scanner error already names line and column
	}
	if problem := blockProblem(src, tags); problem != "" {
		return fmt.Errorf("%s (%w)", problem, err)
	}
	return err
}

// blockProblem is the first mismatch of block statements in tags, or "".
func blockProblem(src string, tags []tag) string {
	var open []tag
	endOf := func(t tag) string {
		if t.keyword == "set" {
			return "endset"
		}
		return blockEnds[t.keyword]
	}
	for _, t := range tags {
		if t.kind != '%' {
			continue
		}
		if len(open) > 0 && open[len(open)-1].keyword == "raw" && t.keyword != "endraw" {
			continue
		}
		if _, ok := blockEnds[t.keyword]; ok || isSetBlock(src, t) {
			open = append(open, t)
			continue
		}
		if !strings.HasPrefix(t.keyword, "end") {
			continue
		}
		if len(open) == 0 {
			return fmt.Sprintf("line %d, col %d: {%% %s %%} closes no block", t.line, t.col, t.keyword)
		}
		top := open[len(open)-1]
		if endOf(top) != t.keyword {
			return fmt.Sprintf("line %d, col %d: {%% %s %%} while the {%% %s %%} of line %d, col %d is still open",
				t.line, t.col, t.keyword, top.keyword, top.line, top.col)
		}
		open = open[:len(open)-1]
	}
	if len(open) > 0 {
		t := open[len(open)-1]
		return fmt.Sprintf("line %d, col %d: {%% %s %%} is never closed by {%% %s %%}", t.line, t.col, t.keyword, endOf(t))
	}
	return ""
}

// isSetBlock reports whether t is `{% set name %}`, which opens a block, rather
// than `{% set name = value %}`.
func isSetBlock(src string, t tag) bool {
	return t.keyword == "set" && !strings.Contains(src[t.start:t.end], "=")
}

package chattemplate

import (
	"fmt"
	"strings"
	"unicode"
)

// tag is one {{ }}, {% %} or {# #} of a template, delimited as Jinja's lexer
// delimits it: quoted strings are skipped, and while a bracket is open a closer is
// just two characters ({{ {'a': {'b': 1}} }} is one tag).
type tag struct {
	start, end   int    // offsets of the opening "{" and just past the closer
	kind         byte   // '{' expression, '%' statement, '#' comment
	left, right  byte   // whitespace control: '-', '+' or 0
	content      string // between the delimiters and their signs
	contentStart int    // offset of content in the source
	keyword      string // a statement's first word
	line, col    int    // 1-based, of the opening "{"
}

// scanTags finds the tags of src in order. A tag that is never closed is an error
// naming its line and column.
func scanTags(src string) ([]tag, error) {
	var tags []tag
	line, col := 1, 1
	pos := 0 // src[:pos] is counted in line and col
	countTo := func(i int) {
		for ; pos < i; pos++ {
			if src[pos] == '\n' {
				line++
				col = 1
			} else {
				col++
			}
		}
	}
	for i := 0; i+1 < len(src); {
		if src[i] != '{' || (src[i+1] != '{' && src[i+1] != '%' && src[i+1] != '#') {
			i++
			continue
		}
		countTo(i)
		t := tag{start: i, kind: src[i+1], line: line, col: col}
		j := i + 2
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			t.left = src[j]
			j++
		}
		t.contentStart = j
		end, err := findCloser(src, j, t.kind)
		if err != nil {
			return nil, fmt.Errorf("line %d, col %d: %w", t.line, t.col, err)
		}
		t.end = end
		contentEnd := end - 2
		if contentEnd > j && (src[contentEnd-1] == '-' || (src[contentEnd-1] == '+' && t.kind != '{')) {
			t.right = src[contentEnd-1]
			contentEnd--
		}
		t.content = src[j:contentEnd]
		if t.kind == '%' {
			t.keyword = keyword(t.content)
		}
		tags = append(tags, t)
		i = end
	}
	return tags, nil
}

// findCloser returns the offset just past the closer of a tag of kind whose
// content starts at i.
func findCloser(src string, i int, kind byte) (int, error) {
	if kind == '#' {
		k := strings.Index(src[i:], "#}")
		if k < 0 {
			return 0, fmt.Errorf(`a comment opened here is never closed by "#}"`)
		}
		return i + k + 2, nil
	}
	closer := byte('}')
	if kind == '%' {
		closer = '%'
	}
	depth := 0
	for i < len(src) {
		switch c := src[i]; c {
		case '\'', '"':
			k := skipString(src, i)
			if k < 0 {
				return 0, fmt.Errorf("a string opened inside this tag is never closed")
			}
			i = k
			continue
		case '(', '[', '{':
			depth++
		case ')', ']':
			if depth > 0 {
				depth--
			}
		case '}':
			if depth > 0 {
				depth--
				i++
				continue
			}
		}
		if depth == 0 && src[i] == closer && i+1 < len(src) && src[i+1] == '}' {
			return i + 2, nil
		}
		i++
	}
	want := "}}"
	if kind == '%' {
		want = "%}"
	}
	return 0, fmt.Errorf("a tag opened here is never closed by %q", want)
}

// skipString returns the offset just past the string literal opening at i, or -1.
func skipString(src string, i int) int {
	q := src[i]
	for i++; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++
		case q:
			return i + 1
		}
	}
	return -1
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

// isSpace is Python's str.isspace, which Jinja's whitespace control uses: Go's
// unicode.IsSpace and the four ASCII separators \x1c-\x1f.
func isSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// blockEnds pairs each statement that opens a block with the one that closes it.
var blockEnds = map[string]string{
	"if": "endif", "for": "endfor", "macro": "endmacro", "call": "endcall",
	"filter": "endfilter", "raw": "endraw", "generation": "endgeneration",
}

// opensBlock reports whether t opens a block; `{% set x %}` does, `{% set x = 1 %}`
// does not.
func opensBlock(t tag) bool {
	if t.kind != '%' {
		return false
	}
	if t.keyword == "set" {
		return !strings.Contains(t.content, "=")
	}
	_, ok := blockEnds[t.keyword]
	return ok
}

func blockEnd(t tag) string {
	if t.keyword == "set" {
		return "endset"
	}
	return blockEnds[t.keyword]
}

// blockProblem is the first mismatch of block statements, or "". The library
// reports an unclosed block without a line, and an {% if %} left open inside a
// loop as an unknown {% endfor %}.
func blockProblem(tags []tag) string {
	var open []tag
	for _, t := range tags {
		if t.kind != '%' {
			continue
		}
		if len(open) > 0 && open[len(open)-1].keyword == "raw" && t.keyword != "endraw" {
			continue
		}
		if opensBlock(t) {
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
		if blockEnd(top) != t.keyword {
			return fmt.Sprintf("line %d, col %d: {%% %s %%} while the {%% %s %%} of line %d, col %d is still open",
				t.line, t.col, t.keyword, top.keyword, top.line, top.col)
		}
		open = open[:len(open)-1]
	}
	if len(open) > 0 {
		t := open[len(open)-1]
		return fmt.Sprintf("line %d, col %d: {%% %s %%} is never closed by {%% %s %%}", t.line, t.col, t.keyword, blockEnd(t))
	}
	return ""
}

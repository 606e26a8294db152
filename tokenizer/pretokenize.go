package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// A splitter cuts text into the words that byte-level BPE merges within, calling emit
// with each in order; the words cover the text exactly.
//
// The splitters are written by hand from the models' regular expressions, as
// llama.cpp does, rather than run through a regexp engine: Go's regexp has no
// lookahead (the patterns end in `\s+(?!\S)`), and dlclark/regexp2, which has, is
// about 5 times slower on the same text (BenchmarkSplit) and skips U+007F in these
// patterns (a bug). The tests hold each splitter equal to regexp2 running the
// original pattern (TestSplittersMatchPatterns, FuzzSplitters).
type splitter func(s string, emit func(word string))

// Patterns of the pre-tokenizers, as the models' tokenizer.json files spell them. The
// splitters implement them; the tests run them through regexp2 to compare.
const (
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// chain applies splitters in turn, each to the words of the one before, as llama.cpp
// applies a list of patterns.
func chain(first splitter, rest ...splitter) splitter {
	if len(rest) == 0 {
		return first
	}
	next := chain(rest[0], rest[1:]...)
	return func(s string, emit func(string)) {
		first(s, func(w string) { next(w, emit) })
	}
}

// decode is utf8.DecodeRuneInString with an invalid byte read as U+FFFD of width 1,
// which classes as a symbol: the splitters keep every byte. An encoded surrogate, which
// llamaText leaves as llama.cpp reads it, is one code point (of no class but "other").
func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if w == 1 && s[i] == 0xED && i+2 < len(s) && s[i+1]&0xE0 == 0xA0 && s[i+2]&0xC0 == 0x80 {
		return 0xD800 | rune(s[i+1]&0x1F)<<6 | rune(s[i+2]&0x3F), 3
	}
	return r, w
}

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	// llama.cpp's tables are Unicode 15.1's, which added CJK Extension I.
	return unicode.IsLetter(r) || 0x2EBF0 <= r && r <= 0x2EE5D
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isSpace(r rune) bool { return unicode.IsSpace(r) }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

func isDefaultPunct(r rune) bool {
	return unicode.IsPunct(r) || strings.ContainsRune("$+<=>^~|", r)
}

// runEnd is the end of the run of runes from i that satisfy f.
func runEnd(s string, i int, f func(rune) bool) int {
	for i < len(s) {
		r, w := decode(s, i)
		if !f(r) {
			break
		}
		i += w
	}
	return i
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at i, ASCII case-insensitively when
// fold is set, and returns its length or 0.
func contraction(s string, i int, fold bool) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return 0
	}
	lower := func(c byte) byte {
		if fold && 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return 2
	}
	if i+2 < len(s) {
		switch string([]byte{lower(s[i+1]), lower(s[i+2])}) {
		case "re", "ve", "ll":
			return 3
		}
	}
	return 0
}

// spaceRun matches the whitespace alternatives at i: \s*[\r\n]+ when newlines is set
// (up to the last newline of the run), then \s+(?!\S) (the run less its last
// character when a non-space follows), then \s+. It returns the match's length, 0 if
// s[i] is not whitespace.
func spaceRun(s string, i int, newlines bool) int {
	end, lastStart, lastNL, n := i, i, -1, 0
	for end < len(s) {
		r, w := decode(s, end)
		if !isSpace(r) {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = end + w
		}
		lastStart = end
		end += w
		n++
	}
	switch {
	case n == 0:
		return 0
	case newlines && lastNL > 0:
		return lastNL - i
	case end == len(s) || n == 1:
		return end - i
	default:
		return lastStart - i
	}
}

// splitGPT2 is patternGPT2.
func splitGPT2(s string, emit func(string)) {
	for i := 0; i < len(s); {
		n := matchGPT2(s, i)
		emit(s[i : i+n])
		i += n
	}
}

func matchGPT2(s string, i int) int {
	if n := contraction(s, i, false); n > 0 {
		return n
	}
	// ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: the optional space only helps when
	// the class follows it, and a space is in none of the classes.
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		start = i + 1
	}
	r, _ := decode(s, start)
	switch {
	case isLetter(r):
		return runEnd(s, start, isLetter) - i
	case isNumber(r):
		return runEnd(s, start, isNumber) - i
	case isOther(r):
		return runEnd(s, start, isOther) - i
	}
	if n := spaceRun(s, i, false); n > 0 {
		return n
	}
	_, w := decode(s, i)
	return w
}

// splitLlama3 is patternLlama3 (digits 3) and patternQwen2 (digits 1).
func splitLlama3(s string, digits int, emit func(string)) {
	for i := 0; i < len(s); {
		n := matchLlama3(s, i, digits)
		emit(s[i : i+n])
		i += n
	}
}

func matchLlama3(s string, i, digits int) int {
	if n := contraction(s, i, true); n > 0 {
		return n
	}
	c, w := decode(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(c) {
		return runEnd(s, i, isLetter) - i
	}
	if c != '\r' && c != '\n' && !isNumber(c) && i+w < len(s) {
		if r, _ := decode(s, i+w); isLetter(r) {
			return runEnd(s, i+w, isLetter) - i
		}
	}
	// \p{N}{1,digits}
	if isNumber(c) {
		j := i
		for k := 0; k < digits && j < len(s); k++ {
			r, rw := decode(s, j)
			if !isNumber(r) {
				break
			}
			j += rw
		}
		return j - i
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	start := -1
	if isOther(c) {
		start = i
	} else if c == ' ' && i+1 < len(s) {
		if r, _ := decode(s, i+1); isOther(r) {
			start = i + 1
		}
	}
	if start >= 0 {
		j := runEnd(s, start, isOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j - i
	}
	if n := spaceRun(s, i, true); n > 0 {
		return n
	}
	return w
}

// splitRuns cuts maximal runs of runes satisfying f from the text between them, as
// a pattern `[class]+` does in llama.cpp's pattern lists.
func splitRuns(f func(rune) bool) splitter {
	return func(s string, emit func(string)) {
		for i := 0; i < len(s); {
			r, _ := decode(s, i)
			in := f(r)
			j := runEnd(s, i, func(r rune) bool { return f(r) == in })
			emit(s[i:j])
			i = j
		}
	}
}

// splitEach makes every rune satisfying f a word of its own (`\p{N}`).
func splitEach(f func(rune) bool) splitter {
	return func(s string, emit func(string)) {
		for i := 0; i < len(s); {
			r, w := decode(s, i)
			j := i + w
			if !f(r) {
				j = runEnd(s, i, func(r rune) bool { return !f(r) })
			}
			emit(s[i:j])
			i = j
		}
	}
}

// splitASCIIDigitTriples is `[0-9][0-9][0-9]`: each three ASCII digits, from the left,
// become a word.
func splitASCIIDigitTriples(s string, emit func(string)) {
	isDigit := func(i int) bool { return i < len(s) && '0' <= s[i] && s[i] <= '9' }
	prev := 0
	for i := 0; i+3 <= len(s); {
		if isDigit(i) && isDigit(i+1) && isDigit(i+2) {
			if i > prev {
				emit(s[prev:i])
			}
			emit(s[i : i+3])
			i += 3
			prev = i
			continue
		}
		i++
	}
	if prev < len(s) {
		emit(s[prev:])
	}
}

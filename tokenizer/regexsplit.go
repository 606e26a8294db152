package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// llama.cpp runs the patterns it has no hand-written code for through std::regex, in
// one of two ways (unicode_regex_split). A pattern with a Unicode class (\p{L}, \p{N},
// \p{P}, \p{M}, \p{S}) runs on a "collapsed" text, one byte a code point: ASCII as
// itself, any other code point as a byte standing for its class, and the classes in
// the pattern become those bytes plus their ASCII members. A pattern without one runs
// on the code points, with non-ASCII whitespace turned into U+000B so that \s sees it.
// regexSplitter does the same, with regexp2 as the engine, so that quirks of the
// scheme (non-ASCII letters are neither a-z nor A-Z; "~" is no \p{S}) come out as
// llama.cpp's do.

// The bytes a collapsed text uses for each class, as llama.cpp numbers them.
const (
	collapsedOther  = 0xD0
	collapsedNumber = 0xD1
	collapsedLetter = 0xD2
	collapsedPunct  = 0xD3
	collapsedMark   = 0xD4
	collapsedSymbol = 0xD5
	// collapsedSpace is what non-ASCII whitespace becomes: \v, which \s matches.
	collapsedSpace = 0x0B
)

// collapsedClasses are llama.cpp's replacements for each Unicode class in a pattern:
// the class's byte and its ASCII members (k_ucat_map; "~" is missing from \p{S}).
var collapsedClasses = map[string]string{
	`\p{N}`: string(rune(collapsedNumber)) + "0-9",
	`\p{L}`: string(rune(collapsedLetter)) + "A-Za-z",
	`\p{P}`: string(rune(collapsedPunct)) + "\x21-\x23\x25-\x2A\x2C-\x2F\x3A-\x3B\x3F-\x40\\\x5B-\\\x5D\x5F\\\x7B\\\x7D",
	`\p{M}`: string(rune(collapsedMark)),
	`\p{S}`: string(rune(collapsedSymbol)) + "\\\x24\\\x2B\x3C-\x3E\x5E\x60\\\x7C",
}

// collapsePattern rewrites a pattern's Unicode classes as llama.cpp does, bracketing
// a class that stands outside brackets. It reports whether the pattern had one.
func collapsePattern(p string) (string, bool) {
	var sb strings.Builder
	inside, found := false, false
	for i := 0; i < len(p); i++ {
		switch {
		case p[i] == '[' && (i == 0 || p[i-1] != '\\'):
			inside = true
		case inside && p[i] == ']' && p[i-1] != '\\':
			inside = false
		case p[i] == '\\' && i+4 < len(p) && collapsedClasses[p[i:i+5]] != "":
			found = true
			if !inside {
				sb.WriteByte('[')
			}
			sb.WriteString(collapsedClasses[p[i:i+5]])
			if !inside {
				sb.WriteByte(']')
			}
			i += 4
			continue
		}
		sb.WriteByte(p[i])
	}
	return sb.String(), found
}

// collapseRune is the code point's byte in a collapsed text.
func collapseRune(r rune) rune {
	switch {
	case r < utf8.RuneSelf:
		if r == 0x7F {
			// regexp2 fails to match U+007F with negated classes; it is in no class of
			// a collapsed pattern, as the fallback byte is in none.
			return collapsedOther
		}
		return r
	case isSpace(r):
		return collapsedSpace
	case isNumber(r):
		return collapsedNumber
	case isLetter(r):
		return collapsedLetter
	case unicode.IsPunct(r):
		return collapsedPunct
	case unicode.IsMark(r):
		return collapsedMark
	case isSymbol(r):
		return collapsedSymbol
	}
	return collapsedOther
}

// wideRune is the code point as a pattern without Unicode classes sees it.
func wideRune(r rune) rune {
	switch {
	case r == 0x7F:
		// As in collapseRune: a code point no pattern names, standing for U+007F.
		return utf8.MaxRune
	case r >= utf8.RuneSelf && isSpace(r):
		return collapsedSpace
	}
	return r
}

// regexSplitter runs one llama.cpp pattern: each match is a word, and so is each run
// of text between matches.
func regexSplitter(pattern string) splitter {
	p, collapsed := collapsePattern(pattern)
	re := regexp2.MustCompile(p, regexp2.None, regexp2.OptionMaxBacktrackingStackSize(-1))
	conv := wideRune
	if collapsed {
		conv = collapseRune
	}
	return func(s string, emit func(string)) {
		runes := make([]rune, 0, len(s))
		offs := make([]int, 0, len(s)+1)
		for i := 0; i < len(s); {
			r, w := decode(s, i)
			runes = append(runes, conv(r))
			offs = append(offs, i)
			i += w
		}
		offs = append(offs, len(s))
		matches, err := re.FindAllRunesIndex(runes, -1)
		if err != nil {
			// Only a timeout or a stack limit fails a match, and neither is set.
			panic("tokenizer: " + err.Error())
		}
		prev := 0
		for _, m := range matches {
			if m[1] == m[0] {
				continue
			}
			if m[0] > prev {
				emit(s[offs[prev]:offs[m[0]]])
			}
			emit(s[offs[m[0]]:offs[m[1]]])
			prev = m[1]
		}
		if prev < len(runes) {
			emit(s[offs[prev]:])
		}
	}
}

// llamaSplitter is one pattern of a llama.cpp pattern list: the two llama.cpp has
// hand-written code for (matched by their exact spelling, as llama.cpp matches them)
// run the splitters written after that code; any other runs through regexSplitter.
func llamaSplitter(pattern string) splitter {
	switch pattern {
	case llamaGPT2:
		return splitGPT2
	case llamaLlama3:
		return func(s string, emit func(string)) { splitLlama3(s, 3, emit) }
	}
	return regexSplitter(pattern)
}

// llamaChain is a llama.cpp pattern list: each pattern applies to the words of the
// one before.
func llamaChain(patterns ...string) splitter {
	steps := make([]splitter, len(patterns))
	for i, p := range patterns {
		steps[i] = llamaSplitter(p)
	}
	return chain(steps[0], steps[1:]...)
}

// isSymbol is \p{S} as llama.cpp's tables (Unicode 15.1) have it: Go's (15.0) lack the
// ideographic description characters added since.
func isSymbol(r rune) bool {
	return unicode.IsSymbol(r) || 0x2FFC <= r && r <= 0x2FFF || r == 0x31EF
}

// llamaText is text as llama.cpp reads it before pre-tokenizing: it decodes UTF-8
// without checking for overlong forms or surrogates, reads each byte it cannot
// decode as U+FFFD, and pre-tokenizes the code points encoded again. Valid UTF-8
// comes back unchanged. (A code point above U+10FFFF, which llama.cpp fails on,
// becomes U+FFFD.)
func llamaText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var out []byte
	for i := 0; i < len(s); {
		c := s[i]
		n := 0
		switch {
		case c < 0x80:
			out = append(out, c)
			i++
			continue
		case c&0x40 == 0:
		case c&0x20 == 0:
			n = 2
		case c&0x10 == 0:
			n = 3
		case c&0x08 == 0:
			n = 4
		}
		ok := n > 0 && i+n <= len(s)
		for k := 1; ok && k < n; k++ {
			ok = s[i+k]&0xC0 == 0x80
		}
		if !ok {
			out = utf8.AppendRune(out, utf8.RuneError)
			i++
			continue
		}
		r := rune(c) & (0x7F >> n)
		for k := 1; k < n; k++ {
			r = r<<6 | rune(s[i+k]&0x3F)
		}
		out = appendLlamaRune(out, r)
		i += n
	}
	return string(out)
}

// appendLlamaRune encodes r as llama.cpp's unicode_cpt_to_utf8 does, surrogates
// included.
func appendLlamaRune(out []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(out, byte(r))
	case r < 0x800:
		return append(out, 0xC0|byte(r>>6), 0x80|byte(r)&0x3F)
	case r < 0x10000:
		return append(out, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	case r <= utf8.MaxRune:
		return append(out, 0xF0|byte(r>>18), 0x80|byte(r>>12)&0x3F, 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	}
	return utf8.AppendRune(out, utf8.RuneError)
}

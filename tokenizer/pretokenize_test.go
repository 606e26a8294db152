package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// The hand-written splitters against the models' patterns run by regexp2, which has
// the lookahead Go's regexp lacks. llama.cpp's pattern lists (the "default" and
// SmolLM chains) apply each pattern to the words of the one before, keeping the text
// between matches as words too; regexChain does the same.

// llama3Adapted is Llama 3's pattern with the case-insensitive group spelled out
// ASCII-only, as llama.cpp adapts it (regexp2's (?i) would also fold "ſ" into "s").
const (
	contractionsASCII = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])`
	llama3Adapted     = contractionsASCII + `|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Adapted      = contractionsASCII + `|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

var referenceChains = map[string][]string{
	preGPT2:    {patternGPT2},
	preLlama3:  {llama3Adapted},
	preQwen2:   {qwen2Adapted},
	preSmolLM:  {`\p{N}`, patternGPT2},
	preDefault: {`[\p{P}\$\+<=>\^~\|]+`, patternGPT2, `\p{N}+`, `[0-9][0-9][0-9]`},
}

func regexChain(t testing.TB, patterns []string) func(string) []string {
	res := make([]*regexp2.Regexp, len(patterns))
	for i, p := range patterns {
		res[i] = regexp2.MustCompile(p, regexp2.None)
	}
	return func(s string) []string {
		words := []string{s}
		for _, re := range res {
			var next []string
			for _, w := range words {
				idx, err := re.FindAllStringIndex(w, -1)
				if err != nil {
					t.Fatal(err)
				}
				prev := 0
				for _, m := range idx {
					if m[0] > prev {
						next = append(next, w[prev:m[0]])
					}
					next = append(next, w[m[0]:m[1]])
					prev = m[1]
				}
				if prev < len(w) {
					next = append(next, w[prev:])
				}
			}
			words = next
		}
		return words
	}
}

func splitWords(family, s string) []string {
	var out []string
	splitterFor(family)(s, func(w string) { out = append(out, w) })
	return out
}

// randomText draws text rich in what the patterns tell apart: contractions in both
// cases, runs of every kind of whitespace, digits of several scripts, letters,
// combining marks, symbols, emoji, CJK, unassigned code points, and any code point
// at all (but U+007F, see regexp2Skips).
func randomText(r *rand.Rand, n int) string {
	pieces := []string{
		"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D", "'x", "'",
		" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\v", "\f", "\u0085", "\u00a0", "\u2028", "\u3000", "\u1680",
		"0", "12", "345", "6789", "٣", "²", "½", "Ⅻ", "૭",
		"a", "Hello", "world", "é", "ß", "Ωμέγα", "Привет", "שלום", "مرحبا", "ǅ", "ʰ",
		"\u0301", "e\u0301", "\u0903", "\u20dd",
		".", ",", "!", "?", "...", "--", "$", "+", "<=>", "^", "~", "|", "`", "(", ")", "[", "]", "{", "}", "@", "#", "%", "&", "*", "/", "\\", "_", "\"",
		"🤖", "🚀", "👩‍👩‍👧", "🇫🇷", "😶‍🌫️",
		"日本語", "中文", "한국어", "ไทย",
		"\u0378", "\ue000", "\ufffd", "\x00", "\x1b", "\u200b", "\u200d", "\ufeff",
	}
	var sb strings.Builder
	for range n {
		if r.IntN(8) == 0 {
			// Any code point at all, most often from the Basic Multilingual Plane.
			c := rune(r.IntN(0x10000))
			if r.IntN(4) == 0 {
				c = rune(r.IntN(utf8.MaxRune + 1))
			}
			if utf8.ValidRune(c) && c != 0x7f {
				sb.WriteRune(c)
			}
			continue
		}
		sb.WriteString(pieces[r.IntN(len(pieces))])
	}
	return sb.String()
}

// regexp2Skips says whether s holds U+007F, which regexp2 (v2.5) fails to match with
// these patterns although each of their classes alone matches it (Hugging Face,
// tiktoken and llama.cpp all take it as [^\s\p{L}\p{N}], as the splitters do), or a
// letter of CJK Extension I, which llama.cpp's Unicode 15.1 tables have and Go's (15.0,
// which regexp2 uses) lack.
func regexp2Skips(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r == 0x7f || 0x2EBF0 <= r && r <= 0x2EE5D })
}

func checkSplitters(t *testing.T, refs map[string]func(string) []string, s string) {
	t.Helper()
	if !utf8.ValidString(s) || regexp2Skips(s) {
		return
	}
	for family, ref := range refs {
		got, want := splitWords(family, s), ref(s)
		if !slices.Equal(got, want) {
			t.Fatalf("%s split of %q\n got %q\nwant %q", family, s, got, want)
		}
	}
}

func referenceSplitters(t testing.TB) map[string]func(string) []string {
	refs := map[string]func(string) []string{}
	for family, patterns := range referenceChains {
		refs[family] = regexChain(t, patterns)
	}
	return refs
}

func TestSplittersMatchPatterns(t *testing.T) {
	refs := referenceSplitters(t)
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		checkSplitters(t, refs, randomText(r, 1+r.IntN(24)))
	}
}

func TestSplitterExamples(t *testing.T) {
	for _, c := range []struct {
		family, in string
		want       []string
	}{
		{preGPT2, "Hello world's  end\n", []string{"Hello", " world", "'s", " ", " end", "\n"}},
		{preLlama3, "I'M 12345 (ok)\n\n  x", []string{"I", "'M", " ", "123", "45", " (", "ok", ")\n\n", " ", " x"}},
		{preQwen2, "x 123", []string{"x", " ", "1", "2", "3"}},
		{preSmolLM, "a12 b", []string{"a", "1", "2", " b"}},
		{preDefault, "x=12345!", []string{"x", "=", "123", "45", "!"}},
	} {
		if got := splitWords(c.family, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s split of %q = %q, want %q", c.family, c.in, got, c.want)
		}
	}
}

// FuzzSplitters holds every pre-tokenizer equal to its pattern run by regexp2, on
// valid UTF-8.
//
//	go test ./tokenizer -run '^$' -fuzz FuzzSplitters -fuzztime 60s
func FuzzSplitters(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		f.Add(randomText(r, 12))
	}
	f.Add("I'm   here\r\n\t'LL 1234567 ½ e\u0301 🤖")
	refs := referenceSplitters(f)
	f.Fuzz(func(t *testing.T, s string) {
		checkSplitters(t, refs, s)
	})
}

// BenchmarkSplit compares the hand-written Llama 3 splitter with regexp2 running the
// pattern, on 100 KB of mixed text: the reason the splitters are hand-written.
func BenchmarkSplit(b *testing.B) {
	text := benchText(100 << 10)
	b.Run("hand-written", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			n := 0
			splitLlama3(text, 3, func(string) { n++ })
		}
	})
	b.Run("regexp2", func(b *testing.B) {
		re := regexp2.MustCompile(llama3Adapted, regexp2.None)
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			if _, err := re.FindAllStringIndex(text, -1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

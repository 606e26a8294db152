package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func cl100kForTest(t testing.TB) *Tiktoken {
	t.Helper()
	tok, err := CL100K()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestCL100KFacts(t *testing.T) {
	tok := cl100kForTest(t)
	if got := tok.VocabSize(); got != 100277 {
		t.Errorf("VocabSize = %d, want 100277", got)
	}
	if got := tok.EOS(); got != 100257 {
		t.Errorf("EOS = %d, want 100257", got)
	}
	if !tok.IsSpecial(tok.EOS()) || tok.IsSpecial(0) {
		t.Error("IsSpecial wrong for EOS or id 0")
	}
	if got := tok.Name(); got != "cl100k_base" {
		t.Errorf("Name = %q", got)
	}
	// A known encoding, so a vocabulary swap is caught: "hello world" is 2 tokens in cl100k.
	if got := tok.Encode("hello world"); len(got) != 2 || got[0] != 15339 || got[1] != 1917 {
		t.Errorf("Encode(hello world) = %v, want [15339 1917]", got)
	}
	if _, ok := tok.TokenBytes(100277); ok {
		t.Error("TokenBytes accepted an id outside the vocabulary")
	}
}

func TestEncodeDoesNotProduceSpecialTokens(t *testing.T) {
	tok := cl100kForTest(t)
	for _, id := range tok.Encode("a <|endoftext|> b <|im_start|>") {
		if tok.IsSpecial(id) {
			t.Fatalf("Encode produced special id %d from text", id)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	tok := cl100kForTest(t)
	for _, s := range []string{
		"",
		"The quick brown fox.",
		"日本語のテキストと中文",
		"emoji 🤖🚀👩‍👩‍👧 and flags 🇫🇷",
		"mixed\n\ttabs  and   spaces\r\n",
		"<|im_start|>user\nhi<|im_end|>\n",
	} {
		if got := tok.Decode(tok.Encode(s)); got != s {
			t.Errorf("round trip %q = %q", s, got)
		}
	}
}

func TestDecodeSkipsSpecialTokens(t *testing.T) {
	tok := cl100kForTest(t)
	ids := append(tok.Encode("done"), tok.EOS())
	if got := tok.Decode(ids); got != "done" {
		t.Errorf("Decode = %q, want %q", got, "done")
	}
}

// TestDetokenizerNeverSplitsCharacters feeds multi-byte text one token at a time and
// checks every piece is valid UTF-8 and the pieces join to the original. The test
// first checks that the text really has tokens that end inside a character, or it
// would prove nothing.
func TestDetokenizerNeverSplitsCharacters(t *testing.T) {
	tok := cl100kForTest(t)
	for _, s := range []string{
		"日本語のテキストと中文、龍と鬱",
		"🤖🚀👩‍👩‍👧🇫🇷 plus 𝕏𝕐",
		"naïve café — “quotes” ☃",
	} {
		ids := tok.Encode(s)
		split := false
		for _, id := range ids {
			if b, _ := tok.TokenBytes(id); !utf8.Valid(b) {
				split = true
			}
		}
		if !split {
			t.Fatalf("%q: no token splits a character; the test needs one", s)
		}
		d := NewDetokenizer(tok)
		var sb strings.Builder
		for _, id := range ids {
			piece := d.Add(id)
			if !utf8.ValidString(piece) {
				t.Fatalf("%q: piece %q is not valid UTF-8", s, piece)
			}
			sb.WriteString(piece)
		}
		sb.WriteString(d.Flush())
		if sb.String() != s {
			t.Errorf("incremental = %q, want %q", sb.String(), s)
		}
	}
}

func TestDetokenizerFlushReplacesUnfinishedCharacter(t *testing.T) {
	tok := cl100kForTest(t)
	ids := tok.Encode("🤖")
	if len(ids) < 2 {
		t.Fatalf("🤖 is %d tokens; need a split", len(ids))
	}
	d := NewDetokenizer(tok)
	if got := d.Add(ids[:len(ids)-1]...); got != "" {
		t.Fatalf("Add before the character is complete = %q, want nothing", got)
	}
	if d.Pending() == 0 {
		t.Fatal("nothing held back")
	}
	if got := d.Flush(); got != "\uFFFD" {
		t.Errorf("Flush = %q, want U+FFFD", got)
	}
	if d.Pending() != 0 {
		t.Error("Flush did not reset")
	}
}

func TestCompletePrefix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"a\xe6\x97", 1},         // 日 missing its last byte
		{"a\xe6\x97\xa5", 4},     // 日 complete
		{"\xf0\x9f\xa4", 0},      // 🤖 missing one byte
		{"\xf0\x9f\xa4\x96x", 5}, // complete then ASCII
		{"a\x97", 2},             // stray continuation: not fixable, not held
		{"a\xe6z", 3},            // broken sequence: not held
		{"ab\xff", 3},            // invalid byte: not held
		{"\xe6\x97\xa5\xe6", 3},  // new character started
		{"\xe6\x97\xa5\xf0\x9f", 3},
	} {
		if got := completePrefix([]byte(tc.in)); got != tc.want {
			t.Errorf("completePrefix(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestDetokenizerMatchesFullDecode is the property that matters: incremental
// detokenization in arbitrary chunk sizes equals decoding everything at once.
func TestDetokenizerMatchesFullDecode(t *testing.T) {
	tok := cl100kForTest(t)
	ids := tok.Encode("Grüße aus Köln 🍺, 北京欢迎你, Ελληνικά, עברית, 🇯🇵🇰🇷")
	want := tok.Decode(ids)
	for chunk := 1; chunk <= 4; chunk++ {
		d := NewDetokenizer(tok)
		var sb strings.Builder
		for i := 0; i < len(ids); i += chunk {
			sb.WriteString(d.Add(ids[i:min(i+chunk, len(ids))]...))
		}
		sb.WriteString(d.Flush())
		if sb.String() != want {
			t.Errorf("chunk %d: %q, want %q", chunk, sb.String(), want)
		}
	}
}

func TestValidTextReplacesMaximalSubparts(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"ok", "ok"},
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"\xf0\x9f\xa4x", "\uFFFDx"},   // 🤖 cut short: one subpart
		{"\xe0\x80a", "\uFFFD\uFFFDa"}, // E0 80 can never be a character
		{"a\xc3", "a\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate
	} {
		if got := validText([]byte(c.in)); got != c.want {
			t.Errorf("validText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

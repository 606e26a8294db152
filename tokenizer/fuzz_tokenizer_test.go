package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzTokenizer encodes arbitrary text with cl100k_base, as the frontend does with
// every rendered prompt. Whatever the text, Encode does not panic, and every id is
// a vocabulary token, never a special one (a user typing "<|endoftext|>" must not
// end the prompt). Valid UTF-8 comes back from Decode unchanged: the model sees
// every character. The Detokenizer, fed one id at a time, gives back what Decode
// gives, in pieces that are each valid UTF-8.
//
//	go test ./tokenizer -run '^$' -fuzz FuzzTokenizer -fuzztime 60s
func FuzzTokenizer(f *testing.F) {
	for _, seed := range []string{
		"Hello, world!",
		"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
		"<|endoftext|> <|fim_prefix|><|fim_middle|><|fim_suffix|><|endofprompt|>",
		"日本語のテキスト、絵文字 👩‍👩‍👧 と結合文字 é",
		"  \t\n\r\n   trailing spaces   ",
		"1234567890 3.14159 -0x7f",
		"a\x7fb",
		"\xff\xfe invalid \xc3",
		"",
	} {
		f.Add(seed)
	}
	tok, err := CL100K()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		for i, id := range ids {
			if int(id) >= tok.VocabSize() || tok.IsSpecial(id) {
				t.Fatalf("Encode(%q)[%d] = %d: outside the vocabulary or special", s, i, id)
			}
		}
		back := tok.Decode(ids)
		var pieces strings.Builder
		d := NewDetokenizer(tok)
		for _, id := range ids {
			p := d.Add(id)
			if !utf8.ValidString(p) {
				t.Fatalf("Detokenizer gave %q, not valid UTF-8", p)
			}
			pieces.WriteString(p)
		}
		pieces.WriteString(d.Flush())
		if pieces.String() != back {
			t.Fatalf("Detokenizer gave %q, Decode %q", pieces.String(), back)
		}
		if !utf8.ValidString(s) {
			return
		}
		if back != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, back)
		}
	})
}

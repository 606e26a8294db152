package tokenizer

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

var (
	roundTripOnce sync.Once
	roundTripToks map[string]*Vocab
)

// roundTripTokenizers are both algorithms in each of their forms: SentencePiece by
// score (stories260K, Phi-3), by rank (Phi-3 from tokenizer.json), and byte-level BPE
// with each pre-tokenizer family (on GPT-2's vocabulary).
func roundTripTokenizers(t testing.TB) map[string]*Vocab {
	roundTripOnce.Do(func() {
		roundTripToks = map[string]*Vocab{
			"stories260K":   vocabFor(t, "stories260K"),
			"phi3":          vocabFor(t, phi3File),
			"phi3-tok.json": fromJSON(t, phi3JSON(t)),
		}
		for pre := range preFamilies {
			s := ggufSpec(t, gpt2File)
			s.Pre = pre
			v, err := newVocab(s)
			if err != nil {
				t.Fatal(err)
			}
			roundTripToks["gpt2:"+pre] = v
		}
	})
	return roundTripToks
}

// FuzzVocabRoundTrip encodes arbitrary text with every model tokenizer. Encode never
// panics and gives only ids of the vocabulary that are not special; the Detokenizer,
// fed one id at a time from the start of a text, gives back what Decode gives, in
// valid UTF-8 pieces; and valid UTF-8 comes back from Decode unchanged (for
// SentencePiece, unless it holds "▁" itself, which the tokenizer reads as a space).
//
//	go test ./tokenizer -run '^$' -fuzz FuzzVocabRoundTrip -fuzztime 60s
func FuzzVocabRoundTrip(f *testing.F) {
	for _, seed := range []string{
		"Once upon a time, there was a little girl.",
		" leading space, and  two, and trailing ",
		"<|user|>\nHi<|end|>\n<s></s><unk><|endoftext|>",
		"日本語のテキスト、絵文字 👩‍👩‍👧 と結合文字 e\u0301",
		"I'M here; you'Re there.  12345678 ½ ٣",
		"\t\n\r\n\v\f\u0085\u00a0\u3000",
		"\xff\xfe invalid \xc3",
		"a\x7fb\x00c",
		"",
	} {
		f.Add(seed)
	}
	toks := roundTripTokenizers(f)
	f.Fuzz(func(t *testing.T, s string) {
		for name, v := range toks {
			ids := v.Encode(s)
			for i, id := range ids {
				if int(id) >= v.VocabSize() || v.IsSpecial(id) {
					t.Fatalf("%s: Encode(%q)[%d] = %d: outside the vocabulary or special", name, s, i, id)
				}
			}
			for _, id := range v.EncodeSpecial(s) {
				if int(id) >= v.VocabSize() {
					t.Fatalf("%s: EncodeSpecial(%q) gave %d", name, s, id)
				}
			}
			back := v.Decode(ids)
			d := NewDetokenizer(v).StartOfText()
			var sb strings.Builder
			for _, id := range ids {
				p := d.Add(id)
				if !utf8.ValidString(p) {
					t.Fatalf("%s: Detokenizer gave %q, not valid UTF-8", name, p)
				}
				sb.WriteString(p)
			}
			sb.WriteString(d.Flush())
			if sb.String() != back {
				t.Fatalf("%s: Detokenizer gave %q, Decode %q", name, sb.String(), back)
			}
			if !utf8.ValidString(s) || v.model == ModelLlama && strings.Contains(s, "▁") {
				continue
			}
			if back != s {
				t.Fatalf("%s: Decode(Encode(%q)) = %q (ids %v)", name, s, back, ids)
			}
		}
	})
}

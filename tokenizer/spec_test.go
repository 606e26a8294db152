package tokenizer

import (
	"slices"
	"strings"
	"testing"

	"github.com/tandem-serve/tandem/gguf"
)

// tinyGPT2 is a small valid byte-level vocabulary: the 256 bytes, "Ġt", "Ġth",
// "Ġthe" and <|endoftext|>.
func tinyGPT2() Spec {
	var s Spec
	noSpecials(&s)
	s.Model, s.Pre = ModelGPT2, "gpt-2"
	for b := range 256 {
		s.Tokens = append(s.Tokens, byteLevel([]byte{byte(b)}))
	}
	s.Tokens = append(s.Tokens, "Ġt", "Ġth", "Ġthe", "<|endoftext|>")
	s.Types = make([]int32, len(s.Tokens))
	for i := range s.Types {
		s.Types[i] = TokenNormal
	}
	s.Types[len(s.Types)-1] = TokenControl
	s.Merges = []string{"Ġ t", "Ġt h", "Ġth e"}
	s.EOS = int32(len(s.Tokens) - 1)
	return s
}

// tinyGGUF writes a GGUF file from key-value pairs.
func tinyGGUF(t *testing.T, kv ...any) *gguf.File {
	t.Helper()
	var w gguf.Writer
	for i := 0; i < len(kv); i += 2 {
		w.Set(kv[i].(string), kv[i+1])
	}
	b, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestTinyGPT2(t *testing.T) {
	v, err := newVocab(tinyGPT2())
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Encode(" the"); !slices.Equal(got, []uint32{258}) {
		t.Errorf("Encode( the) = %v, want [258]", got)
	}
	if got, want := v.EncodeSpecial("a<|endoftext|> the"), []uint32{'a', 259, 258}; !slices.Equal(got, want) {
		t.Errorf("EncodeSpecial = %v, want %v", got, want)
	}
	if got := v.Encode("<|endoftext|>"); slices.Contains(got, 259) {
		t.Errorf("Encode made the control token from its text: %v", got)
	}
}

// TestBadVocabularies: what cannot be a tokenizer is an error naming the problem, at
// load, never a panic later.
func TestBadVocabularies(t *testing.T) {
	for _, c := range []struct {
		name, want string
		edit       func(*Spec)
	}{
		{"no tokens", "no tokens", func(s *Spec) { s.Tokens, s.Types = nil, nil }},
		{"gpt2 without merges", "needs merges", func(s *Spec) { s.Merges = nil }},
		{"types length", "token types for", func(s *Spec) { s.Types = s.Types[:10] }},
		{"scores length", "scores for", func(s *Spec) { s.Scores = []float32{1, 2} }},
		{"bad type", "has type 9", func(s *Spec) { s.Types[3] = 9 }},
		{"eos out of range", "EOS id 999", func(s *Spec) { s.EOS = 999 }},
		{"bos below -1", "BOS id -2", func(s *Spec) { s.BOS = -2 }},
		{"add bos without bos", "no BOS token", func(s *Spec) { s.AddBOS = true }},
		{"unknown pre", `pre-tokenizer "gpt-5"`, func(s *Spec) { s.Pre = "gpt-5" }},
		{"unknown model", `model "bert"`, func(s *Spec) { s.Model = "bert" }},
		{"merge of unknown token", `"Ġq" is not in the vocabulary`, func(s *Spec) { s.Merges = append(s.Merges, "Ġq u") }},
		{"merge result unknown", `the result "tt"`, func(s *Spec) { s.Merges = append(s.Merges, "t t") }},
		{"merge without space", "not two tokens", func(s *Spec) { s.Merges = append(s.Merges, "Ġthe") }},
		{"duplicate token", "appears twice", func(s *Spec) { s.Tokens[300-41] = "Ġt" }},
		{"no stop token", "no end-of-generation", func(s *Spec) { s.EOS = NoToken; s.Tokens[259] = "<|x|>" }},
		{"strip out of range", "strip id", func(s *Spec) { s.RStrip = []int32{5000} }},
		{"scheme on gpt2", "space prefix scheme", func(s *Spec) { s.SpacePrefixScheme = PrefixFirst }},
		{"llama bad byte token", "want <0xNN>", func(s *Spec) { s.Model = ModelLlama; s.Types[5] = TokenByte }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := tinyGPT2()
			c.edit(&s)
			tok, err := FromSpec(s)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("FromSpec: %v, %v; want an error containing %q", tok, err, c.want)
			}
		})
	}
}

func TestBadGGUFVocabularies(t *testing.T) {
	tokens := []string{"<unk>", "<s>", "</s>", "▁a"}
	llamaTokens := func(tokens []string) []any {
		return []any{"tokenizer.ggml.model", "llama", "tokenizer.ggml.tokens", tokens}
	}
	gpt2Model := func() []any { return []any{"tokenizer.ggml.model", "gpt2"} }
	for _, c := range []struct {
		name, want string
		kv         []any
	}{
		{"no model", "tokenizer.ggml.model", []any{"tokenizer.ggml.tokens", tokens}},
		{"unsupported model", `"t5" is not supported`, []any{"tokenizer.ggml.model", "t5", "tokenizer.ggml.tokens", tokens}},
		{"no tokens", "tokenizer.ggml.tokens", []any{"tokenizer.ggml.model", "llama"}},
		{"tokens not strings", "tokenizer.ggml.tokens", []any{"tokenizer.ggml.model", "llama", "tokenizer.ggml.tokens", []int32{1, 2}}},
		{"bos out of range", "bos_token_id = 7", append(llamaTokens(tokens), "tokenizer.ggml.bos_token_id", uint32(7))},
		{"add_bos not bool", "add_bos_token", append(llamaTokens(tokens), "tokenizer.ggml.add_bos_token", "yes")},
		{"scores not numbers", "tokenizer.ggml.scores", append(llamaTokens(tokens), "tokenizer.ggml.scores", []string{"a"})},
		{"score count", "3 scores for 4 tokens", append(llamaTokens(tokens), "tokenizer.ggml.scores", []float32{0, 0, 0})},
		{"gpt2 without merges", "needs merges",
			append(gpt2Model(), "tokenizer.ggml.pre", "gpt-2", "tokenizer.ggml.tokens", tokens, "tokenizer.ggml.eos_token_id", uint32(2))},
		{"unknown pre", `"gpt-4o" is not supported`,
			append(gpt2Model(), "tokenizer.ggml.pre", "gpt-4o", "tokenizer.ggml.tokens", tokens, "tokenizer.ggml.merges", []string{"▁a ▁a"})},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok, err := FromGGUF(tinyGGUF(t, c.kv...))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("FromGGUF: %v, %v; want an error containing %q", tok, err, c.want)
			}
		})
	}
	// The minimal llama vocabulary loads, with llama.cpp's defaults; ids of -1 and
	// 2^32-1 mean none.
	tok, err := FromGGUF(tinyGGUF(t, "tokenizer.ggml.model", "llama", "tokenizer.ggml.tokens", tokens,
		"tokenizer.ggml.padding_token_id", uint32(0xFFFFFFFF), "tokenizer.ggml.eot_token_id", int32(-1)))
	if err != nil {
		t.Fatal(err)
	}
	if bos, _ := tok.BOS(); bos != 1 || tok.EOS() != 2 || !tok.AddBOS() || tok.Decode(tok.Encode("a")) != "a" {
		t.Errorf("defaults: BOS %d EOS %d AddBOS %v", bos, tok.EOS(), tok.AddBOS())
	}
}

// TestMarshalGGUF: a Spec written as a vocab-only GGUF reads back equal, for every
// kind of Spec (GGUF-read, tokenizer.json-read with merges, NFC and strips).
func TestMarshalGGUF(t *testing.T) {
	hf, err := SpecFromHuggingFace(marshalJSON(t, phi3JSON(t)))
	if err != nil {
		t.Fatal(err)
	}
	hf.NFC, hf.LStrip, hf.SpacePrefixScheme = true, []int32{32001}, PrefixFirst
	for name, s := range map[string]Spec{
		"gpt2": ggufSpec(t, gpt2File), "phi3": ggufSpec(t, phi3File), "stories": ggufSpec(t, "stories260K"),
		"tiny": tinyGPT2(), "hf-phi3": hf,
	} {
		t.Run(name, func(t *testing.T) {
			b, err := s.MarshalGGUF()
			if err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			back, err := SpecFromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			if !back.Equal(s) {
				t.Fatalf("read back a different Spec:\n%+v", diffSpec(s, back))
			}
			if _, err := FromSpec(back); err != nil {
				t.Fatal(err)
			}
		})
	}
	a, b := tinyGPT2(), tinyGPT2()
	b.Merges = b.Merges[:2]
	if a.Equal(b) {
		t.Error("Equal ignores merges")
	}
}

func diffSpec(a, b Spec) string {
	var d []string
	check := func(name string, same bool) {
		if !same {
			d = append(d, name)
		}
	}
	check("Model/Pre", a.Model == b.Model && a.Pre == b.Pre)
	check("Tokens", slices.Equal(a.Tokens, b.Tokens))
	check("Scores", slices.Equal(a.Scores, b.Scores))
	check("Types", slices.Equal(a.Types, b.Types))
	check("Merges", slices.Equal(a.Merges, b.Merges))
	check("ids", a.BOS == b.BOS && a.EOS == b.EOS && a.UNK == b.UNK && a.PAD == b.PAD && a.EOT == b.EOT && a.EOM == b.EOM)
	check("flags", a.AddBOS == b.AddBOS && a.AddEOS == b.AddEOS && a.AddSpacePrefix == b.AddSpacePrefix &&
		a.SpacePrefixScheme == b.SpacePrefixScheme && a.NFC == b.NFC)
	check("strips", slices.Equal(a.LStrip, b.LStrip) && slices.Equal(a.RStrip, b.RStrip))
	return strings.Join(d, ", ")
}

func TestEncodeSpecial(t *testing.T) {
	phi3 := vocabFor(t, phi3File)
	// Phi-3's template: llama.cpp's Phi-3 rule has <|user|> and <|end|> swallow the
	// newline after them, and the text after a special token gets its "▁".
	prompt := "<|user|>\nHello<|end|>\n<|assistant|>\n"
	want := append(append([]uint32{32010}, phi3.Encode("Hello")...), 32007, 32001)
	if got := phi3.EncodeSpecial(prompt); !slices.Equal(got, want) {
		t.Errorf("EncodeSpecial(%q) = %v, want %v", prompt, got, want)
	}
	for _, id := range phi3.Encode(prompt) {
		if phi3.IsSpecial(id) {
			t.Fatalf("Encode(%q) produced special id %d", prompt, id)
		}
	}
	if got := phi3.Decode(phi3.EncodeSpecial("<s>Hi<|end|>")); got != "Hi" {
		t.Errorf("Decode skips special tokens and the prefix space: %q", got)
	}

	gpt2 := vocabFor(t, gpt2File)
	want = append(append(gpt2.Encode("a"), 50256), gpt2.Encode(" b")...)
	if got := gpt2.EncodeSpecial("a<|endoftext|> b"); !slices.Equal(got, want) {
		t.Errorf("gpt2 EncodeSpecial = %v, want %v", got, want)
	}

	cl := cl100kForTest(t)
	want = append(append(cl.Encode("x"), 100257), cl.Encode("y<|im_start|>")...)
	want = append(want, 100258)
	if got := cl.EncodeSpecial("x<|endoftext|>y<|im_start|><|fim_prefix|>"); !slices.Equal(got, want) {
		t.Errorf("cl100k EncodeSpecial = %v, want %v", got, want)
	}
	if cl.Piece(100257) != "<|endoftext|>" || cl.Piece(15339) != "hello" {
		t.Errorf("cl100k Piece: %q %q", cl.Piece(100257), cl.Piece(15339))
	}
	if _, ok := cl.BOS(); ok || cl.AddBOS() {
		t.Error("cl100k has no BOS")
	}
}

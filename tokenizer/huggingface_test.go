package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// No real tokenizer.json small enough to commit was at hand, so these tests derive
// them from the GGUF vocabularies under testdata, in the format the `tokenizers`
// library writes (the types below spell it). GPT-2's is the vocabulary and merges as
// they are; Phi-3's has merges generated from the SentencePiece scores the way
// transformers' converter generates them (SentencePieceExtractor), since a
// tokenizer.json carries merges, not scores. Both must then reproduce llama.cpp's
// reference tokenizations, which were made with the real tokenizer.json files.

type jsonAddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type jsonPattern struct {
	String string `json:"String,omitempty"`
	Regex  string `json:"Regex,omitempty"`
}

type jsonNormalizer struct {
	Type        string           `json:"type"`
	Normalizers []jsonNormalizer `json:"normalizers,omitempty"`
	Prepend     string           `json:"prepend,omitempty"`
	Pattern     *jsonPattern     `json:"pattern,omitempty"`
	Content     string           `json:"content,omitempty"`
}

type jsonPreTokenizer struct {
	Type             string             `json:"type"`
	Pretokenizers    []jsonPreTokenizer `json:"pretokenizers,omitempty"`
	AddPrefixSpace   *bool              `json:"add_prefix_space,omitempty"`
	TrimOffsets      *bool              `json:"trim_offsets,omitempty"`
	UseRegex         *bool              `json:"use_regex,omitempty"`
	Pattern          *jsonPattern       `json:"pattern,omitempty"`
	Behavior         string             `json:"behavior,omitempty"`
	Invert           *bool              `json:"invert,omitempty"`
	Replacement      string             `json:"replacement,omitempty"`
	PrependScheme    string             `json:"prepend_scheme,omitempty"`
	Split            *bool              `json:"split,omitempty"`
	IndividualDigits *bool              `json:"individual_digits,omitempty"`
}

type jsonTemplatePiece struct {
	SpecialToken *jsonTemplateID `json:"SpecialToken,omitempty"`
	Sequence     *jsonTemplateID `json:"Sequence,omitempty"`
}

type jsonTemplateID struct {
	ID     string `json:"id"`
	TypeID int    `json:"type_id"`
}

type jsonPostProcessor struct {
	Type   string              `json:"type"`
	Single []jsonTemplatePiece `json:"single,omitempty"`
}

type jsonModel struct {
	Type                    string         `json:"type"`
	Dropout                 *float64       `json:"dropout"`
	UnkToken                *string        `json:"unk_token"`
	ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string        `json:"end_of_word_suffix"`
	FuseUnk                 bool           `json:"fuse_unk"`
	ByteFallback            bool           `json:"byte_fallback"`
	IgnoreMerges            bool           `json:"ignore_merges"`
	Vocab                   map[string]int `json:"vocab"`
	Merges                  any            `json:"merges"`
}

type jsonTokenizer struct {
	Version       string             `json:"version"`
	AddedTokens   []jsonAddedToken   `json:"added_tokens"`
	Normalizer    *jsonNormalizer    `json:"normalizer"`
	PreTokenizer  *jsonPreTokenizer  `json:"pre_tokenizer"`
	PostProcessor *jsonPostProcessor `json:"post_processor"`
	Model         jsonModel          `json:"model"`
}

func ptr[T any](v T) *T { return &v }

func byteLevelPre(useRegex bool) jsonPreTokenizer {
	return jsonPreTokenizer{Type: "ByteLevel", AddPrefixSpace: ptr(false), TrimOffsets: ptr(true), UseRegex: ptr(useRegex)}
}

// gpt2JSON is GPT-2's tokenizer.json, from the GGUF vocabulary.
func gpt2JSON(t testing.TB) jsonTokenizer { return byteLevelJSON(ggufSpec(t, gpt2File)) }

// tinyJSON is tinyGPT2's, for tests of what is wrong with a file.
func tinyJSON() jsonTokenizer { return byteLevelJSON(tinyGPT2()) }

// byteLevelJSON writes a byte-level Spec as GPT-2's tokenizer.json is laid out.
func byteLevelJSON(s Spec) jsonTokenizer {
	j := jsonTokenizer{
		Version:       "1.0",
		PreTokenizer:  ptr(byteLevelPre(true)),
		PostProcessor: &jsonPostProcessor{Type: "ByteLevel"},
		Model:         jsonModel{Type: "BPE", ContinuingSubwordPrefix: ptr(""), EndOfWordSuffix: ptr(""), Vocab: map[string]int{}, Merges: s.Merges},
	}
	for i, tok := range s.Tokens {
		j.Model.Vocab[tok] = i
		if s.Types[i] == TokenControl {
			j.AddedTokens = append(j.AddedTokens, jsonAddedToken{ID: i, Content: tok, Normalized: true, Special: true})
		}
	}
	return j
}

// phi3JSON is Phi-3's tokenizer.json (Llama 2's layout: Prepend and Replace
// normalizers, byte_fallback BPE), from the GGUF vocabulary, with merges as [a, b]
// pairs.
func phi3JSON(t testing.TB) jsonTokenizer {
	s := ggufSpec(t, phi3File)
	const spmSize = 32000 // the SentencePiece model's pieces; the rest are added tokens
	phi3Once.Do(func() {
		phi3Vocab = make(map[string]int, spmSize)
		for i, tok := range s.Tokens[:spmSize] {
			phi3Vocab[tok] = i
		}
		phi3Merges = sentencePieceMerges(s.Tokens[:spmSize], s.Scores[:spmSize], phi3Vocab)
	})
	vocab := phi3Vocab
	j := jsonTokenizer{
		Version: "1.0",
		Normalizer: &jsonNormalizer{Type: "Sequence", Normalizers: []jsonNormalizer{
			{Type: "Prepend", Prepend: "▁"},
			{Type: "Replace", Pattern: &jsonPattern{String: " "}, Content: "▁"},
		}},
		PostProcessor: &jsonPostProcessor{Type: "TemplateProcessing", Single: []jsonTemplatePiece{
			{SpecialToken: &jsonTemplateID{ID: "<s>"}}, {Sequence: &jsonTemplateID{ID: "A"}},
		}},
		Model: jsonModel{Type: "BPE", UnkToken: ptr("<unk>"), FuseUnk: true, ByteFallback: true, Vocab: vocab,
			Merges: phi3Merges},
	}
	for i := range 32011 {
		if i >= 3 && i < spmSize {
			continue
		}
		j.AddedTokens = append(j.AddedTokens, jsonAddedToken{ID: i, Content: s.Tokens[i],
			RStrip: slices.Contains(s.RStrip, int32(i)), Special: s.Tokens[i] != "</s>"})
	}
	return j
}

// The derivation of Phi-3's merges takes a while; it is done once.
var (
	phi3Once   sync.Once
	phi3Vocab  map[string]int
	phi3Merges [][2]string
)

// sentencePieceMerges is transformers' SentencePieceExtractor: every split of every
// piece into two pieces is a merge, ordered by the joined piece's score (highest
// first, stable), the splits of one piece by their sides' ids.
func sentencePieceMerges(tokens []string, scores []float32, vocab map[string]int) [][2]string {
	type m struct {
		l, r  string
		score float32
	}
	var all []m
	for i, piece := range tokens {
		var local []m
		for k := range piece {
			if k == 0 {
				continue
			}
			l, r := piece[:k], piece[k:]
			if _, ok := vocab[l]; !ok {
				continue
			}
			if _, ok := vocab[r]; ok {
				local = append(local, m{l, r, scores[i]})
			}
		}
		sort.SliceStable(local, func(a, b int) bool {
			if vocab[local[a].l] != vocab[local[b].l] {
				return vocab[local[a].l] < vocab[local[b].l]
			}
			return vocab[local[a].r] < vocab[local[b].r]
		})
		all = append(all, local...)
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].score > all[b].score })
	out := make([][2]string, len(all))
	for i, x := range all {
		out[i] = [2]string{x.l, x.r}
	}
	return out
}

func marshalJSON(t testing.TB, j jsonTokenizer) []byte {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fromJSON(t testing.TB, j jsonTokenizer) *Vocab {
	t.Helper()
	s, err := SpecFromHuggingFace(marshalJSON(t, j))
	if err != nil {
		t.Fatal(err)
	}
	v, err := newVocab(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestHuggingFaceReference(t *testing.T) {
	for _, c := range []struct {
		path string
		json func(testing.TB) jsonTokenizer
		name string
	}{
		{gpt2File, gpt2JSON, "gpt2-bpe:gpt-2"},
		{phi3File, phi3JSON, "llama-spm:merges"},
	} {
		t.Run(c.path, func(t *testing.T) {
			v := fromJSON(t, c.json(t))
			if v.Name() != c.name {
				t.Errorf("Name = %q, want %q", v.Name(), c.name)
			}
			for _, rc := range readReference(t, c.path) {
				if got := v.Encode(rc.text); !slices.Equal(got, rc.want) {
					t.Errorf("Encode(%q)\n got %v\nwant %v", rc.text, got, rc.want)
				}
			}
		})
	}
}

func TestHuggingFaceSpecials(t *testing.T) {
	phi3 := fromJSON(t, phi3JSON(t))
	if bos, ok := phi3.BOS(); !ok || bos != 1 || !phi3.AddBOS() {
		t.Errorf("Phi-3 BOS %d %v AddBOS %v, want 1 true true", bos, ok, phi3.AddBOS())
	}
	// tokenizer.json does not name EOS; the first end-of-text control token found is
	// <|endoftext|>, as Phi-3's GGUF says (</s> is not special there).
	if got := phi3.StopTokens(); phi3.EOS() != 32000 || !slices.Equal(got, []uint32{2, 32000, 32007}) {
		t.Errorf("Phi-3 EOS %d, stop %v: want 32000 and [2 32000 32007]", phi3.EOS(), got)
	}
	gpt2 := fromJSON(t, gpt2JSON(t))
	if _, ok := gpt2.BOS(); ok || gpt2.AddBOS() || gpt2.EOS() != 50256 {
		t.Errorf("GPT-2 BOS ok %v AddBOS %v EOS %d", ok, gpt2.AddBOS(), gpt2.EOS())
	}
}

// TestHuggingFaceByteLevelFamilies reads Llama 3's, Qwen2's and SmolLM's
// pre-tokenizer layouts (GPT-2's vocabulary standing in for theirs) and checks each
// builds the tokenizer of the matching GGUF Spec.
func TestHuggingFaceByteLevelFamilies(t *testing.T) {
	base := ggufSpec(t, gpt2File)
	r := rand.New(rand.NewPCG(7, 8))
	var texts []string
	for range 300 {
		texts = append(texts, randomText(r, 1+r.IntN(30)))
	}
	texts = append(texts, "e\u0301 café ﬁ Å") // decomposed and compatibility forms for NFC
	for _, c := range []struct {
		name string
		edit func(*jsonTokenizer)
		spec func(*Spec)
	}{
		{"llama3", func(j *jsonTokenizer) {
			j.PreTokenizer = &jsonPreTokenizer{Type: "Sequence", Pretokenizers: []jsonPreTokenizer{
				{Type: "Split", Pattern: &jsonPattern{Regex: patternLlama3}, Behavior: "Isolated", Invert: ptr(false)},
				byteLevelPre(false),
			}}
			j.Model.IgnoreMerges = true
			j.PostProcessor = &jsonPostProcessor{Type: "TemplateProcessing", Single: []jsonTemplatePiece{
				{SpecialToken: &jsonTemplateID{ID: "<|endoftext|>"}}, {Sequence: &jsonTemplateID{ID: "A"}},
			}}
		}, func(s *Spec) { s.Pre, s.AddBOS, s.BOS = preLlama3, true, 50256 }},
		{"qwen2", func(j *jsonTokenizer) {
			j.Normalizer = &jsonNormalizer{Type: "NFC"}
			j.PreTokenizer = &jsonPreTokenizer{Type: "Sequence", Pretokenizers: []jsonPreTokenizer{
				{Type: "Split", Pattern: &jsonPattern{Regex: patternQwen2}, Behavior: "Isolated", Invert: ptr(false)},
				byteLevelPre(false),
			}}
		}, func(s *Spec) { s.Pre, s.NFC = preQwen2, true }},
		{"dbrx", func(j *jsonTokenizer) {
			j.PreTokenizer = &jsonPreTokenizer{Type: "Sequence", Pretokenizers: []jsonPreTokenizer{
				{Type: "Split", Pattern: &jsonPattern{Regex: patternLlama3}, Behavior: "Isolated", Invert: ptr(false)},
				byteLevelPre(false),
			}}
		}, func(s *Spec) { s.Pre = preDBRX }},
		{"deepseek-v3", func(j *jsonTokenizer) {
			var pre []jsonPreTokenizer
			for _, p := range preFamilies[preDeepSeekV3].patterns {
				pre = append(pre, jsonPreTokenizer{Type: "Split", Pattern: &jsonPattern{Regex: p}, Behavior: "Isolated", Invert: ptr(false)})
			}
			j.PreTokenizer = &jsonPreTokenizer{Type: "Sequence", Pretokenizers: append(pre, byteLevelPre(false))}
		}, func(s *Spec) { s.Pre = preDeepSeekV3 }},
		{"tekken", func(j *jsonTokenizer) {
			var tekken string
			for p, f := range hfSplitPatterns {
				if f == preTekken && strings.Contains(p, `\p{Lu}`) {
					tekken = p
				}
			}
			j.PreTokenizer = &jsonPreTokenizer{Type: "Sequence", Pretokenizers: []jsonPreTokenizer{
				{Type: "Split", Pattern: &jsonPattern{Regex: tekken}, Behavior: "Isolated", Invert: ptr(false)},
				byteLevelPre(false),
			}}
			j.Model.IgnoreMerges = true
		}, func(s *Spec) { s.Pre = preTekken }},
		{"smollm", func(j *jsonTokenizer) {
			j.PreTokenizer = &jsonPreTokenizer{Type: "Sequence", Pretokenizers: []jsonPreTokenizer{
				{Type: "Digits", IndividualDigits: ptr(true)}, byteLevelPre(true),
			}}
		}, func(s *Spec) { s.Pre = preSmolLM }},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := gpt2JSON(t)
			c.edit(&j)
			got := fromJSON(t, j)
			want := base
			c.spec(&want)
			ref, err := newVocab(want)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name() != ref.Name() || got.AddBOS() != ref.AddBOS() {
				t.Fatalf("Name %q AddBOS %v, want %q %v", got.Name(), got.AddBOS(), ref.Name(), ref.AddBOS())
			}
			for _, s := range texts {
				if g, w := got.Encode(s), ref.Encode(s); !slices.Equal(g, w) {
					t.Fatalf("Encode(%q)\n got %v\nwant %v", s, g, w)
				}
			}
		})
	}
	// NFC is applied: a decomposed é encodes as the composed one.
	j := gpt2JSON(t)
	j.Normalizer = &jsonNormalizer{Type: "NFC"}
	v := fromJSON(t, j)
	if g, w := v.Encode("e\u0301"), v.Encode("\u00e9"); !slices.Equal(g, w) {
		t.Errorf("NFC: Encode(e+U+0301) = %v, Encode(é) = %v", g, w)
	}
}

// TestHuggingFaceMetaspace reads the newer spelling of Llama-style tokenizers: a
// Metaspace pre-tokenizer instead of normalizers, whose "first" scheme does not put
// "▁" after a special token or before a text that begins with a space.
func TestHuggingFaceMetaspace(t *testing.T) {
	legacy := fromJSON(t, phi3JSON(t))
	j := phi3JSON(t)
	j.Normalizer = nil
	j.PreTokenizer = &jsonPreTokenizer{Type: "Metaspace", Replacement: "▁", PrependScheme: "first", Split: ptr(false)}
	first := fromJSON(t, j)
	if g, w := first.Encode("Hello world"), legacy.Encode("Hello world"); !slices.Equal(g, w) {
		t.Errorf("first: Encode(Hello world) = %v, legacy %v", g, w)
	}
	// " Hello": legacy prepends a second "▁"; Metaspace does not.
	if g, w := first.Encode(" Hello"), legacy.Encode("Hello"); !slices.Equal(g, w) {
		t.Errorf("first: Encode( Hello) = %v, want %v", g, w)
	}
	// After a special token, "first" puts no "▁"; legacy does.
	user, legacyUser := first.EncodeSpecial("<|user|>Hi"), legacy.EncodeSpecial("<|user|>Hi")
	if user[0] != 32010 || strings.HasPrefix(first.Piece(user[1]), "▁") || !strings.HasPrefix(legacy.Piece(legacyUser[1]), "▁") {
		t.Errorf("EncodeSpecial(<|user|>Hi): first %v (%q), legacy %v (%q)", user, first.Piece(user[1]), legacyUser, legacy.Piece(legacyUser[1]))
	}
	if got := first.Decode(first.Encode("Hello")); got != "Hello" {
		t.Errorf("Decode(Encode(Hello)) = %q", got)
	}
}

func TestHuggingFaceErrors(t *testing.T) {
	for _, c := range []struct {
		name, want string
		edit       func(*jsonTokenizer)
	}{
		{"wordpiece", "model type \"WordPiece\"", func(j *jsonTokenizer) { j.Model.Type = "WordPiece" }},
		{"no merges", "needs merges", func(j *jsonTokenizer) { j.Model.Merges = []string{} }},
		{"merge of unknown", "is not in the vocabulary", func(j *jsonTokenizer) { j.Model.Merges = []string{"Ġ zzzqqq"} }},
		{"bad merges", "neither", func(j *jsonTokenizer) { j.Model.Merges = 7 }},
		{"unknown split", "Split pattern", func(j *jsonTokenizer) {
			j.PreTokenizer = &jsonPreTokenizer{Type: "Sequence", Pretokenizers: []jsonPreTokenizer{
				{Type: "Split", Pattern: &jsonPattern{Regex: `\w+`}, Behavior: "Isolated"}, byteLevelPre(false)}}
		}},
		{"whitespace pre", "pre_tokenizer", func(j *jsonTokenizer) { j.PreTokenizer = &jsonPreTokenizer{Type: "Whitespace"} }},
		{"lowercase", "normalizer Lowercase", func(j *jsonTokenizer) { j.Normalizer = &jsonNormalizer{Type: "Lowercase"} }},
		{"prefix space", "add_prefix_space", func(j *jsonTokenizer) { j.PreTokenizer.AddPrefixSpace = ptr(true) }},
		{"dropout", "dropout", func(j *jsonTokenizer) { j.Model.Dropout = ptr(0.1) }},
		{"single word", "single_word", func(j *jsonTokenizer) { j.AddedTokens[0].SingleWord = true }},
		{"clash", "in added_tokens", func(j *jsonTokenizer) { j.AddedTokens[0].ID = 5 }},
		{"unk not in vocabulary", "unk_token", func(j *jsonTokenizer) { j.Model.UnkToken = ptr("<nope>") }},
		{"roberta", "post_processor RobertaProcessing", func(j *jsonTokenizer) { j.PostProcessor.Type = "RobertaProcessing" }},
		{"ignore merges", "ignore_merges", func(j *jsonTokenizer) { j.Model.IgnoreMerges = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := tinyJSON()
			c.edit(&j)
			_, err := FromHuggingFace(marshalJSON(t, j))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := FromHuggingFace([]byte(`{"model": `)); err == nil {
		t.Error("truncated JSON accepted")
	}
	j := phi3JSON(t)
	j.Model.ByteFallback = false
	if _, err := FromHuggingFace(marshalJSON(t, j)); err == nil || !strings.Contains(err.Error(), "byte_fallback") {
		t.Errorf("Llama-style without byte_fallback: %v", err)
	}
}

// FuzzHuggingFace feeds arbitrary bytes to the tokenizer.json reader: an error or a
// tokenizer, never a panic, and a tokenizer encodes what it is given.
//
//	go test ./tokenizer -run '^$' -fuzz FuzzHuggingFace -fuzztime 60s
func FuzzHuggingFace(f *testing.F) {
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"</s>":3},"merges":["a b"],"byte_fallback":true,"unk_token":"a"},` +
		`"normalizer":{"type":"Replace","pattern":{"String":" "},"content":"▁"},"added_tokens":[{"id":3,"content":"</s>","special":true}]}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"<|endoftext|>":3},"merges":[["a","b"]]},` +
		`"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},"added_tokens":[{"id":3,"content":"<|endoftext|>","special":true}]}`))
	f.Add([]byte(`{"model":{"type":"Unigram"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := FromHuggingFace(data)
		if err != nil {
			return
		}
		for _, s := range []string{"ab ba", "a</s>b<|endoftext|>", "\xff"} {
			for _, id := range tok.EncodeSpecial(s) {
				if int(id) >= tok.VocabSize() {
					t.Fatalf("EncodeSpecial(%q) gave id %d of %d", s, id, tok.VocabSize())
				}
			}
			if got := tok.Decode(tok.Encode(s)); utf8.ValidString(s) && !utf8.ValidString(got) {
				t.Fatalf("Decode gave invalid UTF-8 %q", got)
			}
		}
	})
}

package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// The parts of a Hugging Face tokenizer.json (the `tokenizers` library's
// serialization) that decide how text becomes ids.
type hfFile struct {
	AddedTokens   []hfAddedToken   `json:"added_tokens"`
	Normalizer    *hfNormalizer    `json:"normalizer"`
	PreTokenizer  *hfPreTokenizer  `json:"pre_tokenizer"`
	PostProcessor *hfPostProcessor `json:"post_processor"`
	Model         hfModel          `json:"model"`
}

type hfAddedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Special    bool   `json:"special"`
}

type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type hfNormalizer struct {
	Type        string         `json:"type"`
	Normalizers []hfNormalizer `json:"normalizers"`
	Prepend     string         `json:"prepend"`
	Pattern     hfPattern      `json:"pattern"`
	Content     string         `json:"content"`
}

type hfPreTokenizer struct {
	Type          string           `json:"type"`
	Pretokenizers []hfPreTokenizer `json:"pretokenizers"`
	// ByteLevel
	AddPrefixSpace *bool `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// Split
	Pattern  hfPattern `json:"pattern"`
	Behavior string    `json:"behavior"`
	Invert   bool      `json:"invert"`
	// Metaspace
	Replacement   string `json:"replacement"`
	PrependScheme string `json:"prepend_scheme"`
	Split         *bool  `json:"split"`
	// Digits
	IndividualDigits bool `json:"individual_digits"`
}

type hfPostProcessor struct {
	Type       string            `json:"type"`
	Single     []hfTemplatePiece `json:"single"`
	Processors []hfPostProcessor `json:"processors"`
}

type hfTemplatePiece struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type hfModel struct {
	Type                    string          `json:"type"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	UnkToken                *string         `json:"unk_token"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Dropout                 *float64        `json:"dropout"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
}

// FromHuggingFace builds the tokenizer a Hugging Face tokenizer.json describes.
func FromHuggingFace(data []byte) (Tokenizer, error) {
	s, err := SpecFromHuggingFace(data)
	if err != nil {
		return nil, err
	}
	return FromSpec(s)
}

// SpecFromHuggingFace reads a Hugging Face tokenizer.json as a Spec. It takes the two
// algorithms GGUF files have, as tokenizer.json spells them: BPE with a ByteLevel
// pre-tokenizer (GPT-2; Llama 3, Qwen2 and SmolLM with a Split or Digits before it),
// and BPE with byte_fallback and a "▁" space (Llama 2, Mistral, TinyLlama, Phi-3:
// Prepend and Replace normalizers, or a Metaspace pre-tokenizer). Anything else is an
// error naming the part. tokenizer.json does not say which token is EOS, so it is
// taken from the added tokens by text ("</s>", "<|end_of_text|>", "<|endoftext|>",
// ...); BOS is the token the post-processor puts first, or found the same way.
func SpecFromHuggingFace(data []byte) (Spec, error) {
	var s Spec
	noSpecials(&s)
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return s, fmt.Errorf("tokenizer.json: %w", err)
	}
	m := f.Model
	if m.Type != "BPE" {
		return s, fmt.Errorf("tokenizer.json: model type %q is not supported (want BPE)", m.Type)
	}
	switch {
	case m.Dropout != nil && *m.Dropout != 0:
		return s, fmt.Errorf("tokenizer.json: model dropout %v is not supported", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return s, fmt.Errorf("tokenizer.json: model continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return s, fmt.Errorf("tokenizer.json: model end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	merges, err := hfMerges(m.Merges)
	if err != nil {
		return s, err
	}
	s.Merges = merges

	byteLevel := hasByteLevel(f.PreTokenizer)
	if byteLevel {
		s.Model = ModelGPT2
		if err := hfByteLevel(&f, &s); err != nil {
			return s, err
		}
	} else {
		s.Model = ModelLlama
		if err := hfMetaspace(&f, &s); err != nil {
			return s, err
		}
	}
	if err := hfVocab(&f, &s); err != nil {
		return s, err
	}
	if err := hfPost(f.PostProcessor, &s); err != nil {
		return s, err
	}
	return s, nil
}

func hfMerges(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		return strs, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("tokenizer.json: model merges are neither \"a b\" strings nor [a, b] pairs: %w", err)
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 || p[0] == "" || p[1] == "" {
			return nil, fmt.Errorf("tokenizer.json: merge %d is %q, want two non-empty tokens", i, p)
		}
		// Spec (and GGUF) spell a merge "left right", cut at the first space after the
		// first byte, so a left side with a space inside cannot be spelled.
		if strings.Contains(p[0][1:], " ") {
			return nil, fmt.Errorf("tokenizer.json: merge %d has a space inside its left side %q, which \"left right\" cannot spell", i, p[0])
		}
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}

func hasByteLevel(p *hfPreTokenizer) bool {
	if p == nil {
		return false
	}
	if p.Type == "ByteLevel" {
		return true
	}
	return p.Type == "Sequence" && slices.ContainsFunc(p.Pretokenizers, func(q hfPreTokenizer) bool { return q.Type == "ByteLevel" })
}

// Pre-tokenizer patterns as tokenizer.json files spell them, by family: a Split
// sequence whose regular expressions are exactly the patterns llama.cpp runs for a
// family is that family, and so are the original spellings llama.cpp adapted.
var hfSplitPatterns = func() map[string]string {
	m := map[string]string{
		patternGPT2:   preGPT2,
		patternLlama3: preLlama3,
		patternQwen2:  preQwen2,
		// Mistral's Tekken, before llama.cpp's adaptation.
		"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?" +
			"[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": preTekken,
	}
	for family, info := range preFamilies {
		if info.patterns != nil && family != preDBRX {
			m[strings.Join(info.patterns, "\x00")] = family
		}
	}
	return m
}()

func hfByteLevel(f *hfFile, s *Spec) error {
	if n := f.Normalizer; n != nil {
		if n.Type != "NFC" {
			return fmt.Errorf("tokenizer.json: normalizer %s is not supported with a ByteLevel pre-tokenizer (only NFC)", n.Type)
		}
		s.NFC = true
	}
	p := f.PreTokenizer
	byteLevelOK := func(b hfPreTokenizer, regex bool) error {
		if b.AddPrefixSpace != nil && *b.AddPrefixSpace {
			return fmt.Errorf("tokenizer.json: pre_tokenizer ByteLevel with add_prefix_space is not supported")
		}
		if useRegex := b.UseRegex == nil || *b.UseRegex; useRegex != regex {
			return fmt.Errorf("tokenizer.json: pre_tokenizer ByteLevel use_regex=%v is not supported here", useRegex)
		}
		return nil
	}
	switch {
	case p.Type == "ByteLevel":
		s.Pre = preGPT2
		if err := byteLevelOK(*p, true); err != nil {
			return err
		}
	case len(p.Pretokenizers) >= 2 && p.Pretokenizers[0].Type == "Split" && p.Pretokenizers[len(p.Pretokenizers)-1].Type == "ByteLevel":
		var patterns []string
		for _, sp := range p.Pretokenizers[:len(p.Pretokenizers)-1] {
			if sp.Type != "Split" || sp.Pattern.Regex == nil || sp.Behavior != "Isolated" || sp.Invert {
				return fmt.Errorf("tokenizer.json: pre_tokenizer Split must be an Isolated, non-inverted Regex (got %s)", sp.Type)
			}
			patterns = append(patterns, *sp.Pattern.Regex)
		}
		family, ok := hfSplitPatterns[strings.Join(patterns, "\x00")]
		if !ok {
			return fmt.Errorf("tokenizer.json: pre_tokenizer Split patterns %q are not a pre-tokenizer llama.cpp knows", patterns)
		}
		if family == preLlama3 && !f.Model.IgnoreMerges {
			// Llama 3's pattern without its rules, as DBRX and ChatGLM 4 have it.
			family = preDBRX
		}
		s.Pre = family
		if err := byteLevelOK(p.Pretokenizers[len(p.Pretokenizers)-1], false); err != nil {
			return err
		}
	case len(p.Pretokenizers) == 2 && p.Pretokenizers[0].Type == "Digits" && p.Pretokenizers[1].Type == "ByteLevel":
		if !p.Pretokenizers[0].IndividualDigits {
			return fmt.Errorf("tokenizer.json: pre_tokenizer Digits without individual_digits is not supported")
		}
		s.Pre = preSmolLM
		if err := byteLevelOK(p.Pretokenizers[1], true); err != nil {
			return err
		}
	default:
		var parts []string
		for _, q := range p.Pretokenizers {
			parts = append(parts, q.Type)
		}
		return fmt.Errorf("tokenizer.json: pre_tokenizer %s%v is not supported", p.Type, parts)
	}
	if f.Model.ByteFallback {
		return fmt.Errorf("tokenizer.json: byte_fallback with a ByteLevel pre-tokenizer is not supported")
	}
	if want := preFamilies[s.Pre].ignoreMerges; f.Model.IgnoreMerges != want {
		return fmt.Errorf("tokenizer.json: model ignore_merges=%v with pre-tokenizer %s is not supported (llama.cpp ties it to the pre-tokenizer)",
			f.Model.IgnoreMerges, s.Pre)
	}
	return nil
}

// hfMetaspace reads the SentencePiece-style spelling: "▁" for space by a Replace
// normalizer (with a Prepend for the prefix) or a Metaspace pre-tokenizer.
func hfMetaspace(f *hfFile, s *Spec) error {
	if p := f.PreTokenizer; p != nil && p.Type != "Metaspace" {
		return fmt.Errorf("tokenizer.json: pre_tokenizer %s is not supported (only ByteLevel, alone or after a Split or Digits, and Metaspace)", p.Type)
	}
	if !f.Model.ByteFallback {
		return fmt.Errorf("tokenizer.json: BPE without a ByteLevel pre-tokenizer needs byte_fallback (SentencePiece style); this one has neither")
	}
	if len(s.Merges) == 0 {
		return fmt.Errorf("tokenizer.json: BPE model has no merges")
	}
	if f.Model.IgnoreMerges {
		return fmt.Errorf("tokenizer.json: model ignore_merges is not supported with byte_fallback")
	}
	replaced := false
	if n := f.Normalizer; n != nil {
		norms := []hfNormalizer{*n}
		if n.Type == "Sequence" {
			norms = n.Normalizers
		}
		for _, n := range norms {
			switch {
			case n.Type == "Prepend" && n.Prepend == "▁":
				s.AddSpacePrefix = true
			case n.Type == "Replace" && n.Pattern.String != nil && *n.Pattern.String == " " && n.Content == "▁":
				replaced = true
			default:
				return fmt.Errorf("tokenizer.json: normalizer %s is not supported (only Prepend \"▁\" and Replace \" \" with \"▁\")", n.Type)
			}
		}
	}
	if p := f.PreTokenizer; p != nil {
		if replaced {
			return fmt.Errorf("tokenizer.json: a Replace normalizer and a Metaspace pre_tokenizer together are not supported")
		}
		if p.Replacement != "▁" {
			return fmt.Errorf("tokenizer.json: pre_tokenizer Metaspace replacement %q is not supported", p.Replacement)
		}
		if p.Split == nil || *p.Split {
			return fmt.Errorf("tokenizer.json: pre_tokenizer Metaspace with split is not supported")
		}
		scheme := p.PrependScheme
		if scheme == "" && p.AddPrefixSpace != nil {
			scheme = "never"
			if *p.AddPrefixSpace {
				scheme = PrefixAlways
			}
		}
		switch scheme {
		case PrefixAlways, PrefixFirst:
			s.AddSpacePrefix, s.SpacePrefixScheme = true, scheme
		case "never":
		default:
			return fmt.Errorf("tokenizer.json: pre_tokenizer Metaspace prepend_scheme %q is not supported", p.PrependScheme)
		}
		replaced = true
	}
	if !replaced {
		return fmt.Errorf("tokenizer.json: byte_fallback BPE without a Replace normalizer or Metaspace pre-tokenizer: spaces would not become \"▁\"")
	}
	return nil
}

// hfVocab fills Tokens and Types from the model's vocabulary and the added tokens.
func hfVocab(f *hfFile, s *Spec) error {
	n := 0
	for t, id := range f.Model.Vocab {
		if id < 0 {
			return fmt.Errorf("tokenizer.json: token %q has id %d", t, id)
		}
		n = max(n, id+1)
	}
	for _, a := range f.AddedTokens {
		if a.ID < 0 {
			return fmt.Errorf("tokenizer.json: added token %q has id %d", a.Content, a.ID)
		}
		n = max(n, a.ID+1)
	}
	if n > len(f.Model.Vocab)+len(f.AddedTokens)+1<<16 {
		return fmt.Errorf("tokenizer.json: ids run to %d for %d tokens", n, len(f.Model.Vocab)+len(f.AddedTokens))
	}
	s.Tokens = make([]string, n)
	s.Types = make([]int32, n)
	set := make([]bool, n)
	for t, id := range f.Model.Vocab {
		s.Tokens[id], set[id] = t, true
		s.Types[id] = TokenNormal
		if _, ok := parseByteToken(t); ok && s.Model == ModelLlama {
			s.Types[id] = TokenByte
		}
	}
	for _, a := range f.AddedTokens {
		if a.SingleWord {
			return fmt.Errorf("tokenizer.json: added token %q is single_word, which is not supported", a.Content)
		}
		if set[a.ID] && s.Tokens[a.ID] != a.Content {
			return fmt.Errorf("tokenizer.json: id %d is %q in the vocabulary and %q in added_tokens", a.ID, s.Tokens[a.ID], a.Content)
		}
		s.Tokens[a.ID], set[a.ID] = a.Content, true
		s.Types[a.ID] = TokenUserDefined
		if a.Special {
			s.Types[a.ID] = TokenControl
		}
		if a.LStrip {
			s.LStrip = append(s.LStrip, int32(a.ID))
		}
		if a.RStrip {
			s.RStrip = append(s.RStrip, int32(a.ID))
		}
	}
	for id := range s.Tokens {
		if !set[id] {
			// As llama.cpp's converter fills a vocabulary's holes.
			s.Tokens[id], s.Types[id] = fmt.Sprintf("[PAD%d]", id), TokenUnused
		}
	}
	if u := f.Model.UnkToken; u != nil {
		id, ok := f.Model.Vocab[*u]
		if !ok {
			return fmt.Errorf("tokenizer.json: unk_token %q is not in the vocabulary", *u)
		}
		s.UNK = int32(id)
		if s.Types[id] == TokenNormal {
			s.Types[id] = TokenUnknown
		}
	}
	s.EOS = hfFind(s, "</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>", "<|im_end|>", "<|eot_id|>", "<|end|>")
	return nil
}

// hfFind is the first of texts that is a control token.
func hfFind(s *Spec, texts ...string) int32 {
	for _, t := range texts {
		if i := slices.Index(s.Tokens, t); i >= 0 && s.Types[i] == TokenControl {
			return int32(i)
		}
	}
	return NoToken
}

// hfPost reads which tokens the post-processor puts around a text.
func hfPost(p *hfPostProcessor, s *Spec) error {
	defer func() {
		if s.BOS == NoToken {
			s.BOS = hfFind(s, "<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>")
		}
	}()
	if p == nil {
		return nil
	}
	switch p.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		for _, q := range p.Processors {
			if err := hfPost(&q, s); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
	default:
		return fmt.Errorf("tokenizer.json: post_processor %s is not supported", p.Type)
	}
	seen := false
	for _, piece := range p.Single {
		switch {
		case piece.Sequence != nil:
			seen = true
		case piece.SpecialToken != nil:
			id := slices.Index(s.Tokens, piece.SpecialToken.ID)
			if id < 0 {
				return fmt.Errorf("tokenizer.json: post_processor adds %q, which is not in the vocabulary", piece.SpecialToken.ID)
			}
			if seen {
				if s.AddEOS {
					return fmt.Errorf("tokenizer.json: post_processor adds more than one token after the text")
				}
				s.AddEOS, s.EOS = true, int32(id)
			} else {
				if s.AddBOS {
					return fmt.Errorf("tokenizer.json: post_processor adds more than one token before the text")
				}
				s.AddBOS, s.BOS = true, int32(id)
			}
		}
	}
	return nil
}

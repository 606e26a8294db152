package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tandem-serve/tandem/gguf"
)

// GGUF metadata keys of the tokenizer (llama.cpp's LLM_KV_TOKENIZER_*).
const (
	keyModel          = "tokenizer.ggml.model"
	keyPre            = "tokenizer.ggml.pre"
	keyTokens         = "tokenizer.ggml.tokens"
	keyScores         = "tokenizer.ggml.scores"
	keyTypes          = "tokenizer.ggml.token_type"
	keyMerges         = "tokenizer.ggml.merges"
	keyAddBOS         = "tokenizer.ggml.add_bos_token"
	keyAddEOS         = "tokenizer.ggml.add_eos_token"
	keyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
	// tandem's own keys, for what a Spec from a tokenizer.json holds and GGUF cannot
	// say; llama.cpp ignores them.
	keyPrefixScheme = "tandem.tokenizer.space_prefix_scheme"
	keyNFC          = "tandem.tokenizer.nfc"
	keyLStrip       = "tandem.tokenizer.lstrip"
	keyRStrip       = "tandem.tokenizer.rstrip"
)

var specialKeys = []struct {
	key string
	id  func(*Spec) *int32
}{
	{"tokenizer.ggml.bos_token_id", func(s *Spec) *int32 { return &s.BOS }},
	{"tokenizer.ggml.eos_token_id", func(s *Spec) *int32 { return &s.EOS }},
	{"tokenizer.ggml.unknown_token_id", func(s *Spec) *int32 { return &s.UNK }},
	{"tokenizer.ggml.padding_token_id", func(s *Spec) *int32 { return &s.PAD }},
	{"tokenizer.ggml.eot_token_id", func(s *Spec) *int32 { return &s.EOT }},
	{"tokenizer.ggml.eom_token_id", func(s *Spec) *int32 { return &s.EOM }},
}

// FromGGUF builds the tokenizer a GGUF file describes.
func FromGGUF(f *gguf.File) (Tokenizer, error) {
	s, err := SpecFromGGUF(f)
	if err != nil {
		return nil, err
	}
	return FromSpec(s)
}

// SpecFromGGUF reads a tokenizer from a GGUF file's metadata, with llama.cpp's
// defaults for what the file leaves out: a llama vocabulary has BOS 1, EOS 2, UNK 0,
// adds BOS and a space prefix; a gpt2 one adds BOS only for Llama 3's pre-tokenizer.
// A special id of -1 (or 2^32-1) means none. The Spec is checked when built.
func SpecFromGGUF(f *gguf.File) (Spec, error) {
	var s Spec
	noSpecials(&s)
	var err error
	if s.Model, err = f.String(keyModel); err != nil {
		return s, fmt.Errorf("tokenizer: %w", err)
	}
	if s.Model != ModelLlama && s.Model != ModelGPT2 {
		return s, fmt.Errorf("tokenizer: %s %q is not supported (want %q or %q)", keyModel, s.Model, ModelLlama, ModelGPT2)
	}
	if s.Pre, err = optional(f.String(keyPre)); err != nil {
		return s, err
	}
	if s.Tokens, err = f.Strings(keyTokens); err != nil {
		return s, fmt.Errorf("tokenizer: %w", err)
	}
	if s.Scores, err = optional(f.Float32s(keyScores)); err != nil {
		return s, err
	}
	if s.Types, err = optional(f.Int32s(keyTypes)); err != nil {
		return s, err
	}
	_, hasScores := f.Value(keyScores)
	if s.Model == ModelGPT2 || !hasScores {
		// llama.cpp reads merges for gpt2 only; a llama vocabulary with merges and no
		// scores is one tandem wrote from a tokenizer.json (MarshalGGUF).
		if s.Merges, err = optional(f.Strings(keyMerges)); err != nil {
			return s, err
		}
	}
	n := len(s.Tokens)
	llama := s.Model == ModelLlama
	if llama {
		for _, d := range []struct {
			id  *int32
			def int32
		}{{&s.BOS, 1}, {&s.EOS, 2}, {&s.UNK, 0}} {
			if d.def < int32(n) {
				*d.id = d.def
			}
		}
	}
	for _, k := range specialKeys {
		id, ok, err := specialID(f, k.key, n)
		if err != nil {
			return s, err
		}
		if ok {
			*k.id(&s) = id
		}
	}
	family, _ := preFamily(s.Pre)
	s.AddBOS = llama || preFamilies[family].addBOS
	s.AddSpacePrefix = llama
	for _, b := range []struct {
		key string
		v   *bool
	}{{keyAddBOS, &s.AddBOS}, {keyAddEOS, &s.AddEOS}, {keyAddSpacePrefix, &s.AddSpacePrefix}, {keyNFC, &s.NFC}} {
		v, err := f.Bool(b.key)
		switch {
		case err == nil:
			*b.v = v
		case !errors.Is(err, gguf.ErrMissing):
			return s, fmt.Errorf("tokenizer: %w", err)
		}
	}
	if !llama {
		s.AddSpacePrefix = false
	}
	if s.SpacePrefixScheme, err = optional(f.String(keyPrefixScheme)); err != nil {
		return s, err
	}
	if s.LStrip, err = optional(f.Int32s(keyLStrip)); err != nil {
		return s, err
	}
	if _, ok := f.Value(keyLStrip); !ok && !llama {
		if s.LStrip, err = jinaLStrip(s); err != nil {
			return s, err
		}
	}
	if s.RStrip, err = optional(f.Int32s(keyRStrip)); err != nil {
		return s, err
	}
	if _, ok := f.Value(keyRStrip); !ok {
		s.RStrip = phi3RStrip(f, s)
	}
	return s, nil
}

// optional returns a value, or its zero when the key is absent; other errors (a
// value of the wrong type) stay errors.
func optional[T any](v T, err error) (T, error) {
	if errors.Is(err, gguf.ErrMissing) {
		var zero T
		return zero, nil
	}
	if err != nil {
		return v, fmt.Errorf("tokenizer: %w", err)
	}
	return v, nil
}

// specialID reads a token id key: -1 and 2^32-1 mean none; any other id outside the
// vocabulary is an error (llama.cpp warns and keeps its default).
func specialID(f *gguf.File, key string, n int) (int32, bool, error) {
	id, err := f.Int(key)
	if errors.Is(err, gguf.ErrMissing) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("tokenizer: %w", err)
	}
	if id == -1 || id == math.MaxUint32 {
		return NoToken, true, nil
	}
	if id < 0 || id >= int64(n) {
		return 0, false, fmt.Errorf("tokenizer: %s = %d is outside the vocabulary of %d tokens", key, id, n)
	}
	return int32(id), true, nil
}

// phi3RStrip is llama.cpp's rule for Phi-3, whose GGUF files do not record that its
// special tokens swallow the whitespace after them: for a model named phi-3 or phi3,
// every special token but <unk>, <s> and <|endoftext|> does, and </s> too.
func phi3RStrip(f *gguf.File, s Spec) []int32 {
	name, _ := f.String("general.name")
	name = strings.ToLower(name)
	if !strings.Contains(name, "phi-3") && !strings.Contains(name, "phi3") {
		return nil
	}
	var out []int32
	for i, t := range s.Tokens {
		typ := TokenNormal
		if len(s.Types) > 0 {
			typ = s.Types[i]
		}
		special := typ == TokenControl || typ == TokenUserDefined || typ == TokenUnknown
		switch {
		case t == "<unk>" || t == "<s>" || t == "<|endoftext|>":
		case special || t == "</s>":
			out = append(out, int32(i))
		}
	}
	return out
}

// jinaLStrip is llama.cpp's rule for the jina-v2 vocabularies, whose GGUF files do not
// record that <mask> swallows the whitespace before it. llama.cpp refuses such a file
// without a <mask> token, and so does tandem.
func jinaLStrip(s Spec) ([]int32, error) {
	if !strings.Contains(s.Pre, "jina-v2-de") && !strings.Contains(s.Pre, "jina-v2-es") && !strings.Contains(s.Pre, "jina-v2-code") {
		return nil, nil
	}
	i := slices.Index(s.Tokens, "<mask>")
	if i < 0 {
		return nil, fmt.Errorf("tokenizer: pre-tokenizer %q needs a <mask> token, and the vocabulary has none", s.Pre)
	}
	return []int32{int32(i)}, nil
}

// MarshalGGUF writes s as a vocabulary-only GGUF file (no tensors), the format
// llama.cpp's vocab files use; SpecFromGGUF reads it back to an equal Spec.
func (s Spec) MarshalGGUF() ([]byte, error) {
	var w gguf.Writer
	s.WriteGGUF(&w)
	return w.Bytes()
}

// WriteGGUF adds s's metadata keys to w: a model file written with them carries its
// own tokenizer, as converted models do.
func (s Spec) WriteGGUF(w *gguf.Writer) {
	w.Set(keyModel, s.Model)
	if s.Pre != "" {
		w.Set(keyPre, s.Pre)
	}
	w.Set(keyTokens, s.Tokens)
	if len(s.Scores) > 0 {
		w.Set(keyScores, s.Scores)
	}
	if len(s.Types) > 0 {
		w.Set(keyTypes, s.Types)
	}
	if len(s.Merges) > 0 {
		w.Set(keyMerges, s.Merges)
	}
	for _, k := range specialKeys {
		// Written even when absent (2^32-1, llama.cpp's "none"), so that its defaults
		// do not fill in; as uint32, the only type llama.cpp loads these keys as.
		w.Set(k.key, uint32(*k.id(&s)))
	}
	w.Set(keyAddBOS, s.AddBOS)
	w.Set(keyAddEOS, s.AddEOS)
	w.Set(keyAddSpacePrefix, s.AddSpacePrefix)
	if s.SpacePrefixScheme != "" {
		w.Set(keyPrefixScheme, s.SpacePrefixScheme)
	}
	if s.NFC {
		w.Set(keyNFC, true)
	}
	if len(s.LStrip) > 0 {
		w.Set(keyLStrip, s.LStrip)
	}
	// Always written, so that reading back does not apply the Phi-3 rule again.
	w.Set(keyRStrip, append([]int32{}, s.RStrip...))
}

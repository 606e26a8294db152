package tokenizer

import (
	"math"
	"slices"
)

// Token types, numbered as GGUF's tokenizer.ggml.token_type numbers them.
const (
	TokenUndefined   int32 = 0
	TokenNormal      int32 = 1
	TokenUnknown     int32 = 2
	TokenControl     int32 = 3
	TokenUserDefined int32 = 4
	TokenUnused      int32 = 5
	TokenByte        int32 = 6
)

// NoToken marks a special id a Spec does not have (no BOS, no EOT, ...).
const NoToken int32 = -1

// Tokenizer models a Spec can hold, named as GGUF's tokenizer.ggml.model names them.
const (
	// ModelLlama is SentencePiece-style BPE: "▁" for space, merges chosen by token
	// score (or by merge rank when the Spec has merges, as a Hugging Face
	// tokenizer.json spells the same vocabulary), and <0xNN> byte tokens for what the
	// vocabulary lacks.
	ModelLlama = "llama"
	// ModelGPT2 is byte-level BPE: text split by a pre-tokenizer, every byte mapped to
	// a printable character, merges applied by rank.
	ModelGPT2 = "gpt2"
)

// Space prefix schemes of the llama model (Spec.SpacePrefixScheme).
const (
	// PrefixLegacy puts "▁" before every run of text: at the start and after each
	// special token, whatever the text begins with. It is what llama.cpp does for every
	// GGUF file, and what a Hugging Face tokenizer.json with a Prepend normalizer does.
	PrefixLegacy = ""
	// PrefixAlways is Hugging Face's Metaspace prepend_scheme "always": every run of
	// text gets "▁" unless it already begins with a space.
	PrefixAlways = "always"
	// PrefixFirst is Metaspace prepend_scheme "first": only the run at the very start
	// of the text gets "▁", and only if it does not already begin with a space.
	PrefixFirst = "first"
)

// Spec is everything needed to build a Tokenizer, as plain data: slices and scalars
// that map one to one onto a protobuf message, so that a worker can publish the
// tokenizer of the model it serves and the frontend can build the same one.
// FromSpec checks it; SpecFromGGUF and SpecFromHuggingFace fill it from a file.
type Spec struct {
	// Model is ModelLlama or ModelGPT2.
	Model string
	// Pre names the pre-tokenizer of a gpt2 model as tokenizer.ggml.pre does: any
	// name llama.cpp knows ("default", "gpt-2", "llama-bpe", "qwen2", "deepseek-v3",
	// "tekken", ...). Unused for llama.
	Pre string
	// Tokens is the vocabulary text of each id. A gpt2 vocabulary spells bytes with
	// GPT-2's byte-to-unicode mapping ("Ġ" for space); a llama one uses "▁" for space.
	Tokens []string
	// Scores are the llama model's merge priorities (higher merges first); empty means
	// all zero. Unused for gpt2.
	Scores []float32
	// Types are the Token* types of each id; empty means all normal.
	Types []int32
	// Merges are "left right" pairs in rank order. Required for gpt2; for llama, when
	// present, they replace Scores and merges go by rank, as in a Hugging Face
	// tokenizer.json.
	Merges []string
	// Special ids, NoToken when absent.
	BOS, EOS, UNK, PAD, EOT, EOM int32
	// AddBOS and AddEOS say whether a prompt should start with BOS and end with EOS.
	// Encode never adds them; callers do.
	AddBOS, AddEOS bool
	// AddSpacePrefix (llama only) puts "▁" before the text, as SentencePiece does, so
	// that the first word is spelled as it is after a space; decoding from the start
	// of a text takes it away again.
	AddSpacePrefix bool
	// SpacePrefixScheme is PrefixLegacy, PrefixAlways or PrefixFirst.
	SpacePrefixScheme string
	// NFC normalizes text to Unicode NFC before tokenizing (Qwen2's tokenizer.json asks
	// for it; GGUF files cannot say so and llama.cpp does not).
	NFC bool
	// LStrip and RStrip list special tokens that swallow the whitespace before or after
	// them when found in text (Hugging Face's added-token lstrip and rstrip).
	LStrip, RStrip []int32
}

// Equal reports whether two Specs build the same tokenizer field for field.
func (s Spec) Equal(o Spec) bool {
	sameFloat := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }
	return s.Model == o.Model && s.Pre == o.Pre &&
		slices.Equal(s.Tokens, o.Tokens) &&
		slices.EqualFunc(s.Scores, o.Scores, sameFloat) &&
		slices.Equal(s.Types, o.Types) &&
		slices.Equal(s.Merges, o.Merges) &&
		s.BOS == o.BOS && s.EOS == o.EOS && s.UNK == o.UNK && s.PAD == o.PAD &&
		s.EOT == o.EOT && s.EOM == o.EOM &&
		s.AddBOS == o.AddBOS && s.AddEOS == o.AddEOS &&
		s.AddSpacePrefix == o.AddSpacePrefix && s.SpacePrefixScheme == o.SpacePrefixScheme &&
		s.NFC == o.NFC &&
		slices.Equal(s.LStrip, o.LStrip) && slices.Equal(s.RStrip, o.RStrip)
}

// noSpecials is a Spec's special ids before any is known.
func noSpecials(s *Spec) {
	s.BOS, s.EOS, s.UNK, s.PAD, s.EOT, s.EOM = NoToken, NoToken, NoToken, NoToken, NoToken, NoToken
}

// Package tokenizer turns text into a model's token ids and back.
//
// A model served from a GGUF file brings its own tokenizer, read from the file's
// metadata (SpecFromGGUF) or from a Hugging Face tokenizer.json (SpecFromHuggingFace):
// SentencePiece-style BPE ("llama": Llama 2, Mistral, TinyLlama, Phi-3) or byte-level
// BPE ("gpt2": GPT-2, Llama 3, Qwen2, SmolLM, DeepSeek, Falcon, Mistral's Tekken and
// every other pre-tokenizer llama.cpp names). Both behave as llama.cpp's tokenizers do
// on the same file. A Spec holds a tokenizer as plain data, so a worker can publish the
// tokenizer of the model it serves and the frontend can build the same one (FromSpec).
//
// The random-weight benchmark models use OpenAI's cl100k_base (CL100K): the native
// engine sizes their embedding table by VocabSize.
package tokenizer

// Tokenizer encodes and decodes text for one vocabulary. Implementations are safe for
// concurrent use.
type Tokenizer interface {
	// Name identifies the vocabulary and algorithm, e.g. "cl100k_base", "llama-spm",
	// "gpt2-bpe:llama-bpe".
	Name() string
	// Encode tokenizes text as ordinary text: the text of special and control tokens
	// in it, such as "<|endoftext|>", is encoded as the characters it is, never as the
	// special ids, so a user cannot inject control tokens through a prompt. It never
	// adds BOS or EOS; a caller prepends BOS when AddBOS says so.
	Encode(text string) []uint32
	// EncodeSpecial is Encode, except that the exact text of a special or control token
	// becomes that token: for a chat template's rendered prompt, whose markers
	// ("<|im_start|>") must reach the model as their ids.
	EncodeSpecial(text string) []uint32
	// Decode returns the text of ids, leaving special tokens out. A SentencePiece
	// tokenizer's space before the first word is dropped, since ids passed to Decode
	// begin a text. Bytes that do not form valid UTF-8 (a token sequence cut inside a
	// character) come out as U+FFFD.
	Decode(ids []uint32) string
	// TokenBytes returns the raw bytes of one token as it reads in text, which may be
	// part of a multi-byte character. Special and unused ids have no bytes. ok is false
	// only for an id outside the vocabulary.
	TokenBytes(id uint32) (b []byte, ok bool)
	// Piece is the vocabulary's own spelling of a token ("▁Once", "Ġthe",
	// "<|eot_id|>"), for showing tokens to a person; "" outside the vocabulary.
	Piece(id uint32) string
	// VocabSize is one more than the largest id the model may produce.
	VocabSize() int
	// BOS is the beginning-of-sequence token, if the vocabulary has one.
	BOS() (id uint32, ok bool)
	// AddBOS says whether a prompt should start with BOS.
	AddBOS() bool
	// EOS is the end-of-sequence token.
	EOS() uint32
	// StopTokens are the ids that end generation: EOS, the end-of-turn and
	// end-of-message tokens, and control tokens whose text is a known end-of-turn
	// marker ("<|eot_id|>", "<|im_end|>", "<|end|>", ...).
	StopTokens() []uint32
	// IsSpecial reports whether id is a special (control or unknown) token, which
	// decodes to no text.
	IsSpecial(id uint32) bool
}

// leadingSpacer is implemented by tokenizers that put a space before the first word
// of a text (SentencePiece's add_space_prefix), which decoding from the start of a
// text drops again.
type leadingSpacer interface {
	stripsLeadingSpace() bool
}

func stripsLeadingSpace(t Tokenizer) bool {
	ls, ok := t.(leadingSpacer)
	return ok && ls.stripsLeadingSpace()
}

package native

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/kvcache/blockhash"
	"github.com/tandem-serve/tandem/tokenizer"
)

// Vocabulary of the cl100k tokenizer the frontend uses with the random-weight
// models: ids 0..100276, with <|endoftext|> at 100257.
const (
	VocabSize  = 100277
	EndOfText  = 100257
	panelWidth = 16 // columns per packed weight panel, two AVX2 registers
)

// Rope pairs differ between model families: Llama's GGUF files have Q and K permuted
// for adjacent pairs (2i, 2i+1); Qwen2 and the random models rotate (i, i+dims/2).
type ropeStyle int

const (
	ropeHalves ropeStyle = iota
	ropeAdjacent
)

// ModelConfig is the shape of a Llama-style decoder.
type ModelConfig struct {
	Name          string
	Arch          string // "random" for the seeded benchmark models, else the GGUF architecture
	Layers        int
	DModel        int
	Heads         int
	KVHeads       int
	HeadDim       int
	FFN           int // SwiGLU hidden width
	VocabSize     int
	ContextLength int
	RopeTheta     float64
	RopeDims      int     // leading dimensions of each head that are rotated (0: all)
	RopeScale     float64 // linear position scaling: positions are divided by it (0 or 1: none)
	RopeStyle     ropeStyle
	NormEps       float32
	arch          archSpec // what differs from Llama's forward pass (zero: nothing)
}

// kvDim is the head dimension as stored in KV blocks: padded to whole 16-wide panels
// so that P*V runs on the micro-kernel. Padding lanes stay zero.
func (mc ModelConfig) kvDim() int { return (mc.HeadDim + panelWidth - 1) / panelWidth * panelWidth }

func (mc ModelConfig) ropeDims() int {
	if mc.RopeDims == 0 {
		return mc.HeadDim
	}
	return mc.RopeDims
}

// The named models. tiny keeps d_model small because the tied vocab x d_model
// embedding, not the layers, dominates the cost of a token.
var randomModels = []ModelConfig{
	{Name: "tiny", Arch: "random", Layers: 2, DModel: 128, Heads: 4, KVHeads: 2, HeadDim: 32, FFN: 384,
		VocabSize: VocabSize, ContextLength: 4096, RopeTheta: 10000, NormEps: 1e-5},
	{Name: "small", Arch: "random", Layers: 6, DModel: 384, Heads: 6, KVHeads: 2, HeadDim: 64, FFN: 1024,
		VocabSize: VocabSize, ContextLength: 8192, RopeTheta: 10000, NormEps: 1e-5},
}

// DefaultKVBytes is the KV pool a worker gets when not told its size: 16,384
// blocks of tiny (262,144 tokens), 2,730 of small. A pool of a fixed 1,024 blocks
// held only 16,384 tokens of tiny and filled under a 256-stream soak.
const DefaultKVBytes = 256 << 20

// BlockBytes is the size of one KV block of blockSize tokens: keys and values
// of every layer and KV head, in f32, heads padded to whole panels.
func (mc ModelConfig) BlockBytes(blockSize int) int {
	return mc.Layers * mc.KVHeads * mc.kvDim() * 2 * 4 * blockSize
}

// Models lists the names New accepts.
func Models() []string {
	names := make([]string, len(randomModels))
	for i, m := range randomModels {
		names[i] = m.Name
	}
	return names
}

// LookupModel returns the named model's shape.
func LookupModel(name string) (ModelConfig, bool) {
	i := slices.IndexFunc(randomModels, func(m ModelConfig) bool { return m.Name == name })
	if i < 0 {
		return ModelConfig{}, false
	}
	return randomModels[i], true
}

// Config configures an Engine. Zero values take the defaults.
type Config struct {
	// Model is a random shape from Models(), the embedded "stories260K", or the path
	// of a GGUF file; "" is tiny.
	Model string
	// File, when set, is the GGUF model to serve, already opened (and closed) by the
	// caller; Model is then only its fallback name.
	File *gguf.File
	// ContextLength caps the model's context (0: the model's own).
	ContextLength int
	Seed          uint64 // weights seed of a random shape; both sides of a KV handoff must agree
	// NumBlocks is the KV pool size in blocks (default: as many as DefaultKVBytes
	// holds, and at least 1024).
	NumBlocks int
	// BlockSize is tokens per KV block, a multiple of 16 (default 16).
	BlockSize int
	// MaxBatchTokens bounds the tokens of one forward pass: one per running sequence,
	// the rest for chunked prefill (default 512).
	MaxBatchTokens int
	// MaxRunning bounds the sequences admitted at once (default 64).
	MaxRunning int
	// EventLogSize is how many KV events are kept for subscribers to catch up (default 4096).
	EventLogSize int
	Logger       *slog.Logger
	// Tokenizer is the vocabulary constraints (structured outputs) are compiled
	// against; nil is the model file's own tokenizer, or cl100k_base for a random shape.
	Tokenizer tokenizer.Tokenizer
}

func (c *Config) withDefaults(mc ModelConfig) (Config, ModelConfig, error) {
	out := *c
	if out.ContextLength < 0 || out.ContextLength > mc.ContextLength {
		return out, mc, fmt.Errorf("native: context length %d is outside 1..%d, the model's", out.ContextLength, mc.ContextLength)
	}
	if out.ContextLength > 0 {
		mc.ContextLength = out.ContextLength
	}
	if out.BlockSize == 0 {
		out.BlockSize = blockhash.DefaultBlockSize
	}
	if out.NumBlocks == 0 {
		out.NumBlocks = max(1024, DefaultKVBytes/mc.BlockBytes(out.BlockSize))
	}
	if out.MaxBatchTokens == 0 {
		out.MaxBatchTokens = 512
	}
	if out.MaxRunning == 0 {
		out.MaxRunning = 64
	}
	if out.EventLogSize == 0 {
		out.EventLogSize = 4096
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case out.NumBlocks < 1:
		return out, mc, fmt.Errorf("native: NumBlocks %d < 1", out.NumBlocks)
	case out.BlockSize < 16 || out.BlockSize%16 != 0:
		return out, mc, fmt.Errorf("native: BlockSize %d is not a positive multiple of 16", out.BlockSize)
	case out.MaxBatchTokens < 1 || out.MaxRunning < 1:
		return out, mc, fmt.Errorf("native: MaxBatchTokens and MaxRunning must be positive")
	case out.MaxBatchTokens < out.MaxRunning:
		// Every running sequence needs one token of each step's budget.
		out.MaxBatchTokens = out.MaxRunning
	}
	return out, mc, nil
}

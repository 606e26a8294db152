// Package engine defines what the serving layer needs from whatever runs the model:
// local generation, prefill with KV export, KV import, and the state of the KV pool.
// Implementations live in subpackages: native (a pure-Go transformer) and sim (a
// timing model for scale tests).
package engine

import (
	"context"
	"errors"
	"time"

	"github.com/tandem-serve/tandem/kvcache"
)

// Engine runs one model on one worker.
type Engine interface {
	// Info describes the model and its KV layout; it does not change.
	Info() Info

	// CachedPrefix returns how many leading tokens of prompt are in the prefix cache
	// now: a whole number of blocks, never the whole prompt (the last token is always
	// computed so that there are logits to sample from).
	CachedPrefix(prompt []uint32) int

	// Generate prefills the prompt here, reusing any cached prefix, and decodes.
	Generate(ctx context.Context, req Request) (Stream, error)

	// Prefill computes the prompt's KV and draws the first token. The blocks stay
	// pinned until the Export is released.
	Prefill(ctx context.Context, req Request) (Export, error)

	// Import prepares a sequence whose KV arrives from elsewhere. The first
	// spec.SkipBlocks blocks must already be in this engine's prefix cache; they are
	// pinned at once so eviction cannot take them while the rest arrive.
	Import(ctx context.Context, req Request, spec ImportSpec) (Importer, error)

	// Stats is the pool accounting and load now.
	Stats() Stats

	// Events is the log of KV cache changes, for the router's index.
	Events() *kvcache.EventLog

	// Close stops the engine; running streams end with ErrClosed.
	Close() error
}

// Info describes a loaded model.
type Info struct {
	Engine        string // "native" or "sim"
	Model         string // e.g. "tiny"
	VocabSize     int
	ContextLength int
	TotalBlocks   int
	// MaxBatchedTokens is the most tokens one engine step computes (vLLM's
	// max_num_batched_tokens): a longer prompt is prefilled in chunks of at most
	// this, one step each. 0: unknown.
	MaxBatchedTokens int
	Layout           Layout
}

// Layout is the shape of one KV block as exported.
type Layout struct {
	Layers    int
	KVHeads   int
	HeadDim   int
	BlockSize int
	Dtype     string // "f32"
	// BlockBytes = Layers * 2 * KVHeads * BlockSize * HeadDim * sizeof(Dtype).
	BlockBytes int
	// Fingerprint names the weights; KV from other weights must be refused.
	Fingerprint string
}

// Sampling decides how tokens are drawn. Given the same seed, the token at a position
// is the same whichever engine instance draws it.
type Sampling struct {
	Temperature float32 // 0 is greedy
	TopP        float32 // 0 or 1 is off
	TopK        int     // 0 is off
	Seed        uint64
	// PresencePenalty and FrequencyPenalty are OpenAI's: a token's logit is lowered
	// by FrequencyPenalty times the times it was drawn, plus PresencePenalty once it
	// was. RepetitionPenalty is vLLM's, over prompt and output tokens: a positive
	// logit is divided by it, a negative one multiplied (0 or 1 is off).
	PresencePenalty, FrequencyPenalty, RepetitionPenalty float32
	// LogitBias is added to the logits of its tokens; BanBias or less bans one.
	LogitBias map[uint32]float32
	// MinP drops tokens less likely than MinP times the most likely (0 is off).
	MinP float32
	// Constraint restricts the output's text (structured outputs, enforced tool
	// calls); nil is free text.
	Constraint *Constraint
}

// Constraint is what a constrained sequence's text must be: Prefix, then one JSON
// value valid against JSONSchema, then Suffix; with Repeat, one or more such parts
// joined by Separator. After the last part only a stop token may follow.
type Constraint struct {
	JSONSchema     string
	Prefix, Suffix string
	Repeat         bool
	Separator      string
}

// BanBias is the logit bias that bans a token, as OpenAI's -100 does.
const BanBias = -100

// Penalized reports whether s changes the logits before sampling.
func (s Sampling) Penalized() bool {
	return s.PresencePenalty != 0 || s.FrequencyPenalty != 0 || s.RepetitionPenalty != 0 && s.RepetitionPenalty != 1 || len(s.LogitBias) > 0
}

// Request is one sequence to run.
type Request struct {
	ID         string
	Prompt     []uint32
	Sampling   Sampling
	MaxTokens  int
	StopTokens []uint32
	// Logprobs asks for each drawn token's log-probability under the model (its
	// logits after penalties and logit bias, before temperature or truncation, as
	// vLLM's processed_logprobs mode reports them), with the
	// TopLogprobs most likely tokens at that position.
	Logprobs    bool
	TopLogprobs int
	// PromptLogprobs asks for the prompt tokens' log-probabilities too (OpenAI's
	// echo with logprobs), each with TopLogprobs alternatives, of the model's
	// logits before penalties and bias: the stream is then a PromptLogprobsStream.
	// An engine that cannot compute them refuses the request with
	// ErrNoPromptLogprobs; only Generate computes them.
	PromptLogprobs bool
}

// MaxTopLogprobs bounds Request.TopLogprobs (OpenAI allows 20).
const MaxTopLogprobs = 20

// Logprob is a token and its log-probability.
type Logprob struct {
	Token   uint32
	Logprob float32
}

// TokenLogprobs are a drawn token's log-probability and the most likely tokens at
// its position, most likely first.
type TokenLogprobs struct {
	Logprob float32
	Top     []Logprob
}

// FinishReason says why a stream ended.
type FinishReason int

const (
	FinishNone FinishReason = iota
	FinishStop
	FinishLength
	FinishCancelled
)

func (f FinishReason) String() string {
	switch f {
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishCancelled:
		return "cancelled"
	}
	return "none"
}

// Usage counts a sequence's tokens.
type Usage struct {
	PromptTokens     int
	CachedTokens     int // prompt tokens whose KV was reused, not computed here
	CompletionTokens int
}

// Stream is a running sequence.
type Stream interface {
	// Next blocks for the next token. It returns io.EOF after the last one, when
	// Finish tells why; a stop token ends the stream and is not returned.
	Next(ctx context.Context) (uint32, error)
	// Logprobs are those of the token the last Next returned; nil unless the
	// request asked for them (or the engine cannot compute them).
	Logprobs() *TokenLogprobs
	Finish() FinishReason
	Usage() Usage
	// Close ends the sequence and frees its blocks at once. Safe to call twice.
	Close()
}

// PromptLogprobsStream is the Stream of a request that asked for PromptLogprobs.
type PromptLogprobsStream interface {
	Stream
	// PromptLogprobs are those of the prompt's tokens after the first, each given
	// the tokens before it (one fewer than the prompt's tokens); nil before the
	// first Next has returned (a token, or io.EOF when the first token drawn
	// ended the sequence).
	PromptLogprobs() []TokenLogprobs
}

// TextStream is a Stream whose engine sends the text of what it generated, as a
// GPU engine server that streams text and no token ids does. That text is the
// answer, exactly: the serving layer passes it on instead of detokenizing the
// ids, which are then only the tokenizer's best guess (re-tokenizing an engine's
// text does not give back the model's tokens, nor their text).
type TextStream interface {
	Stream
	// Text is the engine's text for the token the last Next returned; "" when
	// the token's text comes with a later one (it ends inside a character). ok
	// is false when the stream has no text of the engine's: its ids are exact.
	Text() (text string, ok bool)
}

// Export is a prefilled prompt whose KV can be read out block by block.
type Export interface {
	FirstToken() uint32
	// FirstLogprobs are the first token's, when the request asked; else nil.
	FirstLogprobs() *TokenLogprobs
	// NumBlocks covers the whole prompt; the last block may be partly filled.
	NumBlocks() int
	// CachedBlocks were already in this engine's prefix cache.
	CachedBlocks() int
	// AppendBlock appends block i's bytes (Layout.BlockBytes) to dst.
	AppendBlock(dst []byte, i int) ([]byte, error)
	QueueTime() time.Duration
	PrefillTime() time.Duration
	// Release unpins the blocks. Safe to call twice.
	Release()
}

// ImportSpec describes incoming KV.
type ImportSpec struct {
	FirstToken uint32
	// FirstLogprobs travel with the first token, for a request that asked.
	FirstLogprobs *TokenLogprobs
	NumBlocks     int
	SkipBlocks    int
	Layout        Layout
	// BlockWait is how long Import may wait for free blocks when the pool is full
	// (0: fail at once with ErrNoBlocks). It is shorter than the import's context:
	// blocks that come free late leave no time to receive the KV.
	BlockWait time.Duration
}

// Importer receives blocks [SkipBlocks, NumBlocks) in any order, then starts decoding.
type Importer interface {
	// WriteBlock copies block i's bytes into the engine. It must not keep data
	// after it returns: the decode service reads chunks into a buffer it reuses.
	WriteBlock(i int, data []byte) error
	// Commit starts decoding. The stream's first token is the imported first token.
	Commit(ctx context.Context) (Stream, error)
	// Abort frees everything the import held. Safe after Commit (then it does nothing).
	Abort()
}

// Stats is the pool accounting and load.
type Stats struct {
	TotalBlocks  int
	FreeBlocks   int // neither in use nor cached
	CachedBlocks int // holding a reusable prefix, referenced by nothing
	ActiveBlocks int // referenced by a running, waiting or exported sequence
	Running      int
	Waiting      int
	// WaitingTokens are prompt tokens not yet prefilled.
	WaitingTokens int
	// PrefixQueryTokens and PrefixHitTokens count, since the engine started, the
	// prompt tokens of the requests it admitted (and of the KV imports it took)
	// and how many of them its prefix cache already held: vLLM's
	// prefix_cache_queries and prefix_cache_hits.
	PrefixQueryTokens, PrefixHitTokens uint64
	// ConstrainedDraws counts tokens drawn under a Sampling.Constraint, and
	// MaskedDraws those whose first, unconstrained pick the constraint refused, so
	// the whole token mask was applied: their ratio is what the mask costs.
	ConstrainedDraws, MaskedDraws uint64
}

var (
	ErrClosed         = errors.New("engine: closed")
	ErrPromptTooLong  = errors.New("engine: prompt longer than the model's context")
	ErrLayoutMismatch = errors.New("engine: KV layout does not match this model")
	ErrNoBlocks       = errors.New("engine: not enough free KV blocks")
	ErrBadBlock       = errors.New("engine: bad KV block")
	// ErrBadConstraint is a Sampling.Constraint the engine cannot enforce: a schema
	// outside the supported subset, or an engine that enforces none.
	ErrBadConstraint = errors.New("engine: constraint not supported")
	// ErrNoPromptLogprobs is a Request.PromptLogprobs the engine cannot honour.
	ErrNoPromptLogprobs = errors.New("engine: prompt logprobs not supported")
)

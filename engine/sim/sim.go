// Package sim is an engine that models time and KV blocks without computing: tokens
// are pseudo-random but deterministic, and one simulated device runs engine steps
// as vLLM's scheduler does. Each step decodes one token for every running sequence
// and prefills at most a token budget of waiting prompts (chunked, first come first
// served), and its time grows with the prefill tokens in it, so a long local
// prefill stretches the inter-token latency of every sequence decoding beside it.
// KV that a remote prefill hands over arrives after a modelled transfer time. One
// process can run hundreds of these for router and policy experiments.
package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/kvcache"
	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

// Config is the simulated model, its device and its timing.
type Config struct {
	Seed          uint64
	VocabSize     int // tokens drawn from [0, VocabSize); EOSToken is drawn 1 time in 256
	EOSToken      uint32
	ContextLength int
	BlockSize     int
	NumBlocks     int
	// Profile times the device's steps; Link the KV a remote prefill hands over.
	Profile Profile
	Link    Link
	// TimeScale multiplies every modelled time; 0 makes the engine as fast as it
	// can go, each sequence then paced by its reader.
	TimeScale float64
	// Clock is what the device waits on; nil is the wall clock.
	Clock Clock
	// OnStep, if set, is called after each engine step, on the device's goroutine.
	OnStep func(Step)
}

// DefaultConfig is Dynamo's mocker fit to a GPU, with a cl100k vocabulary.
func DefaultConfig() Config {
	cfg, err := ConfigFor("mocker", "rdma")
	if err != nil {
		panic(err) // the built-in names exist
	}
	return cfg
}

// ConfigFor is the default configuration with the named profile and link (empty
// names: mocker and rdma).
func ConfigFor(profile, link string) (Config, error) {
	if profile == "" {
		profile = "mocker"
	}
	if link == "" {
		link = "rdma"
	}
	p, err := ProfileNamed(profile)
	if err != nil {
		return Config{}, err
	}
	l, err := LinkNamed(link)
	if err != nil {
		return Config{}, err
	}
	return Config{
		Seed: 1, VocabSize: 100257, EOSToken: 100257, ContextLength: 8192,
		BlockSize: blockhash.DefaultBlockSize, NumBlocks: p.KVTokens / blockhash.DefaultBlockSize, Profile: p, Link: l, TimeScale: 1,
	}, nil
}

// Engine is the simulated engine.
type Engine struct {
	cfg    Config
	layout engine.Layout
	pool   *kvcache.Pool
	dev    *device
	// prefixQueries and prefixHits count admitted prompt tokens and those cached.
	prefixQueries, prefixHits atomic.Uint64
	// Hooks announces prompts joining the queue and reports each timed step
	// (an untimed engine's steps take no time worth learning).
	engine.Hooks
	// closing ends every sleep when the engine closes.
	closing context.Context
	close   context.CancelFunc
}

var (
	_ engine.Engine       = (*Engine)(nil)
	_ engine.LoadNotifier = (*Engine)(nil)
	_ engine.StepReporter = (*Engine)(nil)
)

// New returns a simulated engine.
func New(cfg Config) (*Engine, error) {
	if cfg.BlockSize <= 0 || cfg.NumBlocks <= 0 || cfg.VocabSize <= 0 || cfg.ContextLength <= 0 {
		return nil, fmt.Errorf("sim: block size, blocks, vocab and context must be positive")
	}
	if cfg.Profile.MaxNumSeqs <= 0 || cfg.Profile.MaxBatchedTokens <= 0 {
		return nil, fmt.Errorf("sim: profile %q: max sequences and batched tokens must be positive", cfg.Profile.Name)
	}
	if cfg.TimeScale < 0 {
		return nil, fmt.Errorf("sim: time scale %g must not be negative", cfg.TimeScale)
	}
	if cfg.Clock == nil {
		cfg.Clock = wallClock{}
	}
	const layers, heads, dim = 1, 1, 8
	closing, closeFn := context.WithCancel(context.Background())
	e := &Engine{
		closing: closing, close: closeFn,
		cfg: cfg,
		layout: engine.Layout{
			Layers: layers, KVHeads: heads, HeadDim: dim, BlockSize: cfg.BlockSize, Dtype: "f32",
			BlockBytes:  layers * 2 * heads * cfg.BlockSize * dim * 4,
			Fingerprint: fmt.Sprintf("sim/seed=%d", cfg.Seed),
		},
		pool: kvcache.NewPool(cfg.NumBlocks, kvcache.NewEventLog(4096)),
	}
	e.dev = newDevice(e)
	return e, nil
}

func (e *Engine) Info() engine.Info {
	return engine.Info{
		Engine: "sim", Model: "sim", VocabSize: e.cfg.VocabSize + 1, ContextLength: e.cfg.ContextLength,
		TotalBlocks: e.cfg.NumBlocks, MaxBatchedTokens: e.cfg.Profile.MaxBatchedTokens, Layout: e.layout,
	}
}

// CachedPrefix counts the cached leading blocks, leaving the last token to compute.
func (e *Engine) CachedPrefix(prompt []uint32) int {
	return e.cacheable(prompt, e.pool.Match(blockhash.Hash(prompt, e.cfg.BlockSize)))
}

// cacheable caps a count of matched blocks so that at least the prompt's last token
// is computed, and converts it to tokens.
func (e *Engine) cacheable(prompt []uint32, blocks int) int {
	return min(blocks, (len(prompt)-1)/e.cfg.BlockSize) * e.cfg.BlockSize
}

func (e *Engine) Events() *kvcache.EventLog { return e.pool.Events() }

// Snapshot lists the prefix cache for subscribers that join or fall behind.
func (e *Engine) Snapshot() kvcache.Snapshot { return e.pool.Snapshot() }

// Stats reports the device as vLLM does: running counts the sequences decoding and
// those whose prefill has begun, waiting those not yet scheduled, and waiting
// tokens every prompt token not yet computed.
func (e *Engine) Stats() engine.Stats {
	ps := e.pool.Stats()
	running, waiting, tokens := e.dev.load()
	return engine.Stats{
		TotalBlocks: ps.Total, FreeBlocks: ps.Free, CachedBlocks: ps.Cached, ActiveBlocks: ps.Active,
		Running: running, Waiting: waiting, WaitingTokens: tokens,
		PrefixHitTokens: e.prefixHits.Load(), PrefixQueryTokens: e.prefixQueries.Load(), // hits first: see admit
	}
}

// Close ends every running sequence with ErrClosed.
func (e *Engine) Close() error {
	e.close()
	e.dev.closeAll()
	return nil
}

func (e *Engine) blocksFor(tokens int) int { return (tokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize }

// outputBudget is how many tokens a request may generate.
func (e *Engine) outputBudget(req engine.Request) int {
	left := e.cfg.ContextLength - len(req.Prompt)
	if req.MaxTokens > 0 {
		return min(req.MaxTokens, left)
	}
	return left
}

// seqBlocks is what one sequence holds in the pool.
type seqBlocks struct {
	ids    []kvcache.BlockID
	hashes []uint64 // of the prompt's full blocks
	cached int      // leading blocks reused from the prefix cache
}

// check refuses what no wait would make servable.
func (e *Engine) check(req engine.Request, maxTokens int) error {
	if len(req.Prompt) == 0 {
		return fmt.Errorf("sim: empty prompt")
	}
	if len(req.Prompt) >= e.cfg.ContextLength {
		return engine.ErrPromptTooLong
	}
	if req.Sampling.Constraint != nil {
		// Its tokens are timing stand-ins, not text: an answer that ignored the
		// constraint would look like one that obeyed it, so it is refused outright.
		return fmt.Errorf("%w: the sim engine generates placeholder tokens and cannot enforce response_format or tool_choice; serve with --engine native or a GPU engine", engine.ErrBadConstraint)
	}
	if req.PromptLogprobs {
		return fmt.Errorf("%w: the sim engine computes no distribution; serve with --engine native or vLLM", engine.ErrNoPromptLogprobs)
	}
	if e.closing.Err() != nil {
		return engine.ErrClosed
	}
	if n := e.seqBlocksFor(len(req.Prompt), maxTokens); n > e.cfg.NumBlocks {
		return fmt.Errorf("%w: %d tokens need %d blocks, the whole pool is %d", engine.ErrNoBlocks,
			min(len(req.Prompt)+maxTokens, e.cfg.ContextLength), n, e.cfg.NumBlocks)
	}
	return nil
}

// seqBlocksFor is what a sequence of up to prompt + maxTokens tokens holds.
func (e *Engine) seqBlocksFor(prompt, maxTokens int) int {
	return e.blocksFor(min(prompt+maxTokens, e.cfg.ContextLength))
}

// pin takes the cached prefix (at most wantCached blocks if wantCached >= 0) for
// a sequence, so that eviction cannot take it.
func (e *Engine) pin(req engine.Request, wantCached int) (*seqBlocks, error) {
	sb := &seqBlocks{hashes: blockhash.Hash(req.Prompt, e.cfg.BlockSize)}
	reusable := e.cacheable(req.Prompt, len(sb.hashes)) / e.cfg.BlockSize
	if wantCached >= 0 {
		reusable = min(reusable, wantCached)
	}
	sb.ids = e.pool.Acquire(nil, sb.hashes[:reusable])
	sb.cached = len(sb.ids)
	if wantCached >= 0 && sb.cached < wantCached {
		e.pool.Release(sb.ids)
		return nil, fmt.Errorf("%w: only %d of the %d blocks to skip are cached here", engine.ErrBadBlock, sb.cached, wantCached)
	}
	return sb, nil
}

// fill allocates the rest of a pinned sequence's blocks, all or none, and counts
// its prompt in the prefix cache's queries and hits once it has them.
func (e *Engine) fill(req engine.Request, sb *seqBlocks, maxTokens int) bool {
	ids, ok := e.pool.Allocate(sb.ids, e.seqBlocksFor(len(req.Prompt), maxTokens)-sb.cached)
	if !ok {
		return false
	}
	sb.ids = ids
	// Queries before hits, and Stats loads hits first: a scrape between the two
	// never reads a hit rate above 1.
	e.prefixQueries.Add(uint64(len(req.Prompt)))
	e.prefixHits.Add(uint64(sb.cached * e.cfg.BlockSize))
	return true
}

// allocate pins the cached prefix and allocates the rest of a local prompt's
// blocks now, or returns false holding nothing. The prefix is matched when the
// blocks are granted, as vLLM's scheduler matches it when it schedules a request,
// so a request waiting for blocks pins nothing while it waits.
func (e *Engine) allocate(req engine.Request, maxTokens int) (*seqBlocks, bool) {
	sb, err := e.pin(req, -1)
	if err != nil { // unreachable with no skip asked for
		return nil, false
	}
	if !e.fill(req, sb, maxTokens) {
		e.pool.Release(sb.ids)
		return nil, false
	}
	return sb, true
}

// storePrompt enters the prompt's computed full blocks into the prefix cache.
func (e *Engine) storePrompt(sb *seqBlocks) {
	full := len(sb.hashes)
	if full <= sb.cached {
		return
	}
	parent := uint64(0)
	if sb.cached > 0 {
		parent = sb.hashes[sb.cached-1]
	}
	e.pool.Store(parent, sb.ids[sb.cached:full], sb.hashes[sb.cached:full])
}

// scaled converts modelled milliseconds into time on the clock.
func (e *Engine) scaled(ms float64) time.Duration {
	return time.Duration(ms * e.cfg.TimeScale * float64(time.Millisecond))
}

// token is the simulated model: a pure function of the prompt, the output position
// and (when sampling) the seed, so every path and every instance agrees.
func (e *Engine) token(promptHash uint64, s engine.Sampling, k int) uint32 {
	var b [32]byte
	binary.LittleEndian.PutUint64(b[0:], e.cfg.Seed)
	binary.LittleEndian.PutUint64(b[8:], promptHash)
	binary.LittleEndian.PutUint64(b[16:], uint64(k))
	if s.Temperature > 0 {
		binary.LittleEndian.PutUint64(b[24:], s.Seed)
	}
	h := xxh3.Hash(b[:])
	if h%256 == 0 {
		return e.cfg.EOSToken
	}
	return uint32((h >> 8) % uint64(e.cfg.VocabSize))
}

func promptHash(prompt []uint32) uint64 {
	b := make([]byte, 4*len(prompt))
	for i, t := range prompt {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	return xxh3.Hash(b)
}

// Generate queues the prompt's uncached tokens for prefill on this device; the
// sequence decodes once its last chunk has run. A prompt that cannot have its
// blocks yet waits for them in arrival order (the device's admission queue) and
// the stream's first Next blocks meanwhile, as vLLM keeps a request it cannot
// schedule waiting; only one that could never fit the pool is refused.
func (e *Engine) Generate(ctx context.Context, req engine.Request) (engine.Stream, error) {
	if err := e.check(req, e.outputBudget(req)); err != nil {
		return nil, err
	}
	s := e.newSeq(req, nil, kindGenerate)
	e.dev.enqueue(ctx, s)
	return s, nil
}

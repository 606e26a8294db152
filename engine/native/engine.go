// Package native is a pure-Go Llama-style transformer engine: RMSNorm, RoPE,
// grouped-query attention and a SwiGLU MLP, with weights generated from a seed and
// the cl100k vocabulary; a paged KV cache with prefix caching and KV events;
// continuous batching with chunked prefill and preemption; deterministic sampling;
// and KV export and import for disaggregated prefill.
//
// Semantics the interface leaves open: Request.MaxTokens 0 means no limit but the
// context; a stream cancelled through its context ends with the context's error,
// one closed with Close ends with io.EOF and FinishCancelled; Usage.CachedTokens of
// an imported sequence counts the blocks it skipped (found in the local cache), not
// the ones that arrived. A Prefill's first token is drawn at output position 0 with
// the request's sampling, so the importer's decoding continues at position 1.
//
// One scheduler goroutine runs every forward pass. Callers talk to it through
// queues; the block pool (kvcache.Pool) is shared and locked, so imports and exports
// move blocks without waiting for a step.
package native

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/gguf"
	"github.com/tandem-serve/tandem/kvcache"
	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

var (
	_ engine.Engine       = (*Engine)(nil)
	_ engine.LoadNotifier = (*Engine)(nil)
	_ engine.StepReporter = (*Engine)(nil)
)

// ErrNotCached is returned by Import when a block it was told to skip is no longer in
// this engine's prefix cache (evicted since CachedPrefix was asked): import it all,
// or prefill locally.
var ErrNotCached = errors.New("native: skipped blocks are not in the prefix cache")

// Engine is the native engine. Its methods are safe for concurrent use.
type Engine struct {
	cfg   Config
	mc    ModelConfig
	info  engine.Info
	model *model
	ld    *loaded    // the weights, shared with other engines of this process serving the same model
	src   *gguf.File // the model file served, opened here or by the caller; nil for a random shape
	pool  *kvcache.Pool
	log   *slog.Logger

	mu          sync.Mutex
	closed      bool
	nextArrival uint64
	incoming    []*sequence
	cancels     []cancelReq
	wake        chan struct{} // capacity 1: a pending nudge to the scheduler
	// importWaiters counts imports waiting for free blocks (allocateWaiting).
	importWaiters atomic.Int32
	done          chan struct{} // closed when the scheduler has exited

	running, waiting, waitingTokens atomic.Int64
	// Hooks announces prompts joining the queue and reports each step.
	engine.Hooks
	preemptions               atomic.Uint64
	constrainedDraws          atomic.Uint64
	maskedDraws               atomic.Uint64 // constrained draws whose first pick the constraint refused
	constr                    constraints
	prefixQueries, prefixHits atomic.Uint64
	maxDecodeBatch            atomic.Int64
}

type cancelReq struct {
	seq *sequence
	err error // nil for Close: the stream then ends with io.EOF
}

// New generates the model's weights and starts the scheduler.
func New(cfg Config) (*Engine, error) {
	start := time.Now()
	ld, err := acquireModel(cfg)
	if err != nil {
		return nil, err
	}
	w, file := ld.w, ld.file
	c, mc, err := cfg.withDefaults(ld.mc)
	if err != nil {
		_ = releaseModel(ld)
		return nil, err
	}
	m := newModel(mc, w, c.NumBlocks, c.BlockSize)
	e := &Engine{
		cfg:   c,
		mc:    mc,
		model: m,
		ld:    ld,
		src:   cmpOr(cfg.File, file),
		pool:  kvcache.NewPool(c.NumBlocks, kvcache.NewEventLog(c.EventLogSize)),
		log:   c.Logger,
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	e.info = engine.Info{
		Engine:           "native",
		Model:            mc.Name,
		VocabSize:        mc.VocabSize,
		ContextLength:    mc.ContextLength,
		TotalBlocks:      c.NumBlocks,
		MaxBatchedTokens: c.MaxBatchTokens,
		Layout: engine.Layout{
			Layers:      mc.Layers,
			KVHeads:     mc.KVHeads,
			HeadDim:     mc.HeadDim,
			BlockSize:   c.BlockSize,
			Dtype:       "f32",
			BlockBytes:  4 * m.blockFloats,
			Fingerprint: w.fingerprint,
		},
	}
	go e.loop()
	e.log.Info("native engine ready", "model", mc.Name, "arch", mc.Arch, "family", mc.arch, "head_dim", mc.HeadDim,
		"fingerprint", w.fingerprint, "blocks", c.NumBlocks, "block_size", c.BlockSize, "asm", haveAsm,
		"load_seconds", time.Since(start).Seconds(), "engines_sharing_weights", ld.sharers())
	return e, nil
}

func (e *Engine) Info() engine.Info { return e.info }

// ModelFile is the GGUF file the engine serves, for what else a worker publishes
// about its model (tokenizer, chat template); nil for a random-weight shape.
func (e *Engine) ModelFile() *gguf.File { return e.src }

func cmpOr(a, b *gguf.File) *gguf.File {
	if a != nil {
		return a
	}
	return b
}

func (e *Engine) Events() *kvcache.EventLog { return e.pool.Events() }

// Snapshot lists the prefix cache and the last event it reflects, for subscribers
// that join late or fall behind the event log.
func (e *Engine) Snapshot() kvcache.Snapshot { return e.pool.Snapshot() }

func (e *Engine) CachedPrefix(prompt []uint32) int {
	bs := e.cfg.BlockSize
	if len(prompt) == 0 {
		return 0
	}
	hashes := blockhash.Hash(prompt, bs)
	usable := min(len(hashes), (len(prompt)-1)/bs)
	return e.pool.Match(hashes[:usable]) * bs
}

func (e *Engine) Stats() engine.Stats {
	ps := e.pool.Stats()
	return engine.Stats{
		TotalBlocks:   ps.Total,
		FreeBlocks:    ps.Free,
		CachedBlocks:  ps.Cached,
		ActiveBlocks:  ps.Active,
		Running:       int(e.running.Load()),
		Waiting:       int(e.waiting.Load()),
		WaitingTokens: int(e.waitingTokens.Load()),
		// Hits first (and the scheduler adds queries first): a scrape between
		// the two may then see a hit rate a little low, never above 1.
		PrefixHitTokens:   e.prefixHits.Load(),
		PrefixQueryTokens: e.prefixQueries.Load(),
		ConstrainedDraws:  e.constrainedDraws.Load(),
		MaskedDraws:       e.maskedDraws.Load(),
	}
}

// Preemptions counts sequences whose blocks were taken back to be recomputed later.
func (e *Engine) Preemptions() uint64 { return e.preemptions.Load() }

// MaxDecodeBatch is the most sequences one forward pass has decoded a token for:
// above 1 means continuous batching has happened.
func (e *Engine) MaxDecodeBatch() int { return int(e.maxDecodeBatch.Load()) }

// validate rejects requests the engine could never run.
func (e *Engine) validate(req engine.Request) error {
	if len(req.Prompt) == 0 {
		return fmt.Errorf("native: request %q: empty prompt", req.ID)
	}
	if len(req.Prompt) > e.mc.ContextLength {
		return fmt.Errorf("%w: %d tokens, context %d", engine.ErrPromptTooLong, len(req.Prompt), e.mc.ContextLength)
	}
	for i, t := range req.Prompt {
		if int(t) >= e.mc.VocabSize {
			return fmt.Errorf("native: request %q: token %d at %d is outside the vocabulary", req.ID, t, i)
		}
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > engine.MaxTopLogprobs {
		return fmt.Errorf("native: request %q: %d top logprobs, want 0 to %d", req.ID, req.TopLogprobs, engine.MaxTopLogprobs)
	}
	if need := (len(req.Prompt) + e.cfg.BlockSize) / e.cfg.BlockSize; need > e.cfg.NumBlocks {
		return fmt.Errorf("%w: prompt needs %d blocks, pool has %d", engine.ErrNoBlocks, need, e.cfg.NumBlocks)
	}
	return e.checkConstraint(req)
}

// Generate queues req. Its MaxTokens counts completion tokens; 0 runs until a stop
// token or the end of the context. With req.PromptLogprobs the prompt's logprobs
// are computed as it is prefilled, from the hidden states the prefill computes
// anyway (its cached prefix is not reused: those positions would have none).
func (e *Engine) Generate(ctx context.Context, req engine.Request) (engine.Stream, error) {
	if err := e.validate(req); err != nil {
		return nil, err
	}
	s := newSequence(req, kindGenerate)
	if err := e.submit(ctx, s); err != nil {
		return nil, err
	}
	return &stream{e: e, seq: s}, nil
}

// Prefill computes req's prompt and draws its first token, and returns once the
// blocks can be read.
func (e *Engine) Prefill(ctx context.Context, req engine.Request) (engine.Export, error) {
	if err := e.validate(req); err != nil {
		return nil, err
	}
	if req.PromptLogprobs {
		return nil, fmt.Errorf("%w: a prefill for another worker exports KV, not the prompt's logprobs; prefill it where it decodes",
			engine.ErrNoPromptLogprobs)
	}
	s := newSequence(req, kindPrefill)
	if err := e.submit(ctx, s); err != nil {
		return nil, err
	}
	select {
	case <-s.released:
	case <-ctx.Done():
		e.cancel(s, ctx.Err())
		e.awaitRelease(s)
	case <-e.done:
		return nil, engine.ErrClosed
	}
	if s.export != nil {
		if err := ctx.Err(); err != nil {
			s.export.Release()
			return nil, err
		}
		return s.export, nil
	}
	s.out.mu.Lock()
	err := s.out.err
	s.out.mu.Unlock()
	if err == nil {
		err = errors.New("native: prefill ended without a token")
	}
	return nil, err
}

// submit hands s to the scheduler and ties it to ctx.
func (e *Engine) submit(ctx context.Context, s *sequence) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return engine.ErrClosed
	}
	e.nextArrival++
	s.arrival = e.nextArrival
	e.incoming = append(e.incoming, s)
	// Under the lock: the scheduler reads stopCtx once it has taken s, and a cancel
	// (which needs the lock) cannot be queued before s arrives.
	s.stopCtx = context.AfterFunc(ctx, func() { e.cancel(s, ctx.Err()) })
	e.mu.Unlock()
	e.kick()
	return nil
}

// cancel asks the scheduler to drop s and free its blocks.
func (e *Engine) cancel(s *sequence, err error) {
	e.mu.Lock()
	e.cancels = append(e.cancels, cancelReq{s, err})
	e.mu.Unlock()
	e.kick()
}

func (e *Engine) awaitRelease(s *sequence) {
	select {
	case <-s.released:
	case <-e.done:
	}
}

func (e *Engine) kick() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Close stops the scheduler; every sequence still running ends with ErrClosed and
// its blocks are freed. Exports already returned stay readable until released.
func (e *Engine) Close() error {
	e.mu.Lock()
	already := e.closed
	e.closed = true
	e.mu.Unlock()
	if !already {
		e.kick()
	}
	<-e.done
	if already {
		return nil
	}
	// The scheduler has exited, so no forward pass of this engine reads the weights.
	return releaseModel(e.ld)
}

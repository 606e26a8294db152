// Package sim is an engine that models time and KV blocks without computing: tokens
// are pseudo-random but deterministic, prefill takes a time polynomial in the
// uncached prompt tokens, and a decode step's time grows with the KV the pool holds.
// One process can run hundreds of them for router and policy experiments.
package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/kvcache"
	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

// Config is the simulated model and its timing. Times are in milliseconds, as the
// fitted model in Dynamo's mocker gives them.
type Config struct {
	Seed          uint64
	VocabSize     int // tokens drawn from [0, VocabSize); EOSToken is drawn 1 time in 256
	EOSToken      uint32
	ContextLength int
	BlockSize     int
	NumBlocks     int
	// Prefill time in ms for T uncached tokens: PrefillA*T^2 + PrefillB*T + PrefillC.
	PrefillA, PrefillB, PrefillC float64
	// Decode step time in ms at KV pool usage u in [0,1]: max(1, DecodeA*u^2 + DecodeB*u + DecodeC).
	DecodeA, DecodeB, DecodeC float64
	// TimeScale multiplies every modelled time; 0 makes the engine as fast as it can go.
	TimeScale float64
}

// DefaultConfig is Dynamo's mocker fit to a GPU, with a cl100k vocabulary.
func DefaultConfig() Config {
	return Config{
		Seed: 1, VocabSize: 100257, EOSToken: 100257, ContextLength: 8192,
		BlockSize: blockhash.DefaultBlockSize, NumBlocks: 16384,
		PrefillA: 4.209989e-7, PrefillB: 1.518344e-2, PrefillC: 16.50142,
		DecodeA: -25.74, DecodeB: 54.01, DecodeC: 5.74,
		TimeScale: 1,
	}
}

// Engine is the simulated engine.
type Engine struct {
	cfg    Config
	layout engine.Layout
	pool   *kvcache.Pool

	compute sync.Mutex // one prefill at a time, as on one device
	// closing ends every running sequence when the engine closes.
	closing context.Context
	close   context.CancelFunc

	mu            sync.Mutex
	closed        bool
	running       int
	waiting       int
	waitingTokens int
}

var _ engine.Engine = (*Engine)(nil)

// New returns a simulated engine.
func New(cfg Config) (*Engine, error) {
	if cfg.BlockSize <= 0 || cfg.NumBlocks <= 0 || cfg.VocabSize <= 0 || cfg.ContextLength <= 0 {
		return nil, fmt.Errorf("sim: block size, blocks, vocab and context must be positive")
	}
	const layers, heads, dim = 1, 1, 8
	closing, closeFn := context.WithCancelCause(context.Background())
	return &Engine{
		closing: closing, close: func() { closeFn(engine.ErrClosed) },
		cfg: cfg,
		layout: engine.Layout{
			Layers: layers, KVHeads: heads, HeadDim: dim, BlockSize: cfg.BlockSize, Dtype: "f32",
			BlockBytes:  layers * 2 * heads * cfg.BlockSize * dim * 4,
			Fingerprint: fmt.Sprintf("sim/seed=%d", cfg.Seed),
		},
		pool: kvcache.NewPool(cfg.NumBlocks, kvcache.NewEventLog(4096)),
	}, nil
}

func (e *Engine) Info() engine.Info {
	return engine.Info{
		Engine: "sim", Model: "sim", VocabSize: e.cfg.VocabSize + 1, ContextLength: e.cfg.ContextLength,
		TotalBlocks: e.cfg.NumBlocks, Layout: e.layout,
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

func (e *Engine) Stats() engine.Stats {
	ps := e.pool.Stats()
	e.mu.Lock()
	defer e.mu.Unlock()
	return engine.Stats{
		TotalBlocks: ps.Total, FreeBlocks: ps.Free, CachedBlocks: ps.Cached, ActiveBlocks: ps.Active,
		Running: e.running, Waiting: e.waiting, WaitingTokens: e.waitingTokens,
	}
}

// Close ends every running sequence with ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.close()
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

// admit pins the cached prefix (at most skip blocks if skip >= 0) and allocates the
// rest of the blocks for a sequence of up to prompt + maxTokens tokens.
func (e *Engine) admit(req engine.Request, maxTokens, wantCached int) (*seqBlocks, error) {
	if len(req.Prompt) == 0 {
		return nil, fmt.Errorf("sim: empty prompt")
	}
	if len(req.Prompt) >= e.cfg.ContextLength {
		return nil, engine.ErrPromptTooLong
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, engine.ErrClosed
	}
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
	n := e.blocksFor(min(len(req.Prompt)+maxTokens, e.cfg.ContextLength)) - sb.cached
	ids, ok := e.pool.Allocate(sb.ids, n)
	if !ok {
		e.pool.Release(sb.ids)
		return nil, engine.ErrNoBlocks
	}
	sb.ids = ids
	return sb, nil
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

// prefill waits for the device and sleeps the modelled prefill time.
func (e *Engine) prefill(ctx context.Context, tokens int) (queue, took time.Duration, err error) {
	e.mu.Lock()
	e.waiting++
	e.waitingTokens += tokens
	e.mu.Unlock()
	start := time.Now()
	e.compute.Lock()
	queue = time.Since(start)
	e.mu.Lock()
	e.waiting--
	e.waitingTokens -= tokens
	e.mu.Unlock()
	defer e.compute.Unlock()
	t := float64(tokens)
	err = e.sleep(ctx, e.cfg.PrefillA*t*t+e.cfg.PrefillB*t+e.cfg.PrefillC)
	return queue, time.Since(start) - queue, err
}

func (e *Engine) decodeStepMS() float64 {
	u := float64(e.pool.Stats().Active) / float64(e.cfg.NumBlocks)
	return max(1, e.cfg.DecodeA*u*u+e.cfg.DecodeB*u+e.cfg.DecodeC)
}

func (e *Engine) sleep(ctx context.Context, ms float64) error {
	d := time.Duration(ms * e.cfg.TimeScale * float64(time.Millisecond))
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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

func (e *Engine) Generate(ctx context.Context, req engine.Request) (engine.Stream, error) {
	sb, err := e.admit(req, e.outputBudget(req), -1)
	if err != nil {
		return nil, err
	}
	s := e.newStream(req, sb)
	go s.run(ctx, func(ctx context.Context) error {
		_, _, err := e.prefill(ctx, len(req.Prompt)-sb.cached*e.cfg.BlockSize)
		if err == nil {
			e.storePrompt(sb)
		}
		return err
	}, nil)
	return s, nil
}

// stream runs one sequence in its own goroutine and hands tokens over a channel.
type stream struct {
	e       *Engine
	req     engine.Request
	hash    uint64
	blocks  *seqBlocks
	out     chan uint32
	done    chan struct{}
	cancel  context.CancelFunc
	once    sync.Once
	finish  engine.FinishReason
	usage   engine.Usage
	err     error
	started chan struct{}
}

func (e *Engine) newStream(req engine.Request, sb *seqBlocks) *stream {
	return &stream{
		e: e, req: req, hash: promptHash(req.Prompt), blocks: sb,
		out: make(chan uint32), done: make(chan struct{}), started: make(chan struct{}),
		usage: engine.Usage{PromptTokens: len(req.Prompt), CachedTokens: sb.cached * e.cfg.BlockSize},
	}
}

// run prefills (unless first is given, from an import) and decodes until a stop
// token, max tokens, the context's end, or cancellation.
func (s *stream) run(parent context.Context, prefill func(context.Context) error, first *uint32) {
	ctx, cancel := context.WithCancel(parent)
	s.cancel = cancel
	close(s.started)
	defer close(s.done)
	defer s.e.pool.Release(s.blocks.ids)
	stopClose := context.AfterFunc(s.e.closing, cancel)
	defer stopClose()
	s.e.mu.Lock()
	s.e.running++
	s.e.mu.Unlock()
	defer func() {
		s.e.mu.Lock()
		s.e.running--
		s.e.mu.Unlock()
	}()
	if prefill != nil {
		if err := prefill(ctx); err != nil {
			s.finish, s.err = engine.FinishCancelled, s.cause(err)
			return
		}
	}
	maxTokens := s.e.outputBudget(s.req)
	for k := 0; ; k++ {
		if k >= maxTokens {
			s.finish = engine.FinishLength
			return
		}
		var tok uint32
		if k == 0 && first != nil {
			tok = *first
		} else {
			if k > 0 {
				if err := s.e.sleep(ctx, s.e.decodeStepMS()); err != nil {
					s.finish, s.err = engine.FinishCancelled, s.cause(err)
					return
				}
			}
			tok = s.e.token(s.hash, s.req.Sampling, k)
		}
		for _, st := range s.req.StopTokens {
			if tok == st {
				s.finish = engine.FinishStop
				return
			}
		}
		select {
		case s.out <- tok:
			s.usage.CompletionTokens++
		case <-ctx.Done():
			s.finish, s.err = engine.FinishCancelled, s.cause(ctx.Err())
			return
		}
	}
}

// cause reports ErrClosed for a sequence the engine's Close ended.
func (s *stream) cause(err error) error {
	if s.e.closing.Err() != nil {
		return engine.ErrClosed
	}
	return err
}

func (s *stream) Next(ctx context.Context) (uint32, error) {
	select {
	case t := <-s.out:
		return t, nil
	case <-s.done:
		if s.err != nil {
			return 0, s.err
		}
		return 0, io.EOF
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Finish and Usage are final once Next has returned io.EOF.
func (s *stream) Finish() engine.FinishReason { return s.finish }

// Logprobs is nil: the sim engine draws tokens from a hash, with no distribution.
func (s *stream) Logprobs() *engine.TokenLogprobs { return nil }
func (s *stream) Usage() engine.Usage             { return s.usage }

func (s *stream) Close() {
	s.once.Do(func() {
		<-s.started
		s.cancel()
		<-s.done
	})
}

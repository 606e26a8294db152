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
		BlockSize: kvcache.DefaultBlockSize, NumBlocks: 16384,
		PrefillA: 4.209989e-7, PrefillB: 1.518344e-2, PrefillC: 16.50142,
		DecodeA: -25.74, DecodeB: 54.01, DecodeC: 5.74,
		TimeScale: 1,
	}
}

// Engine is the simulated engine.
type Engine struct {
	cfg    Config
	layout engine.Layout
	events *kvcache.EventLog

	compute sync.Mutex // one prefill at a time, as on one device

	mu            sync.Mutex
	closed        bool
	running       int
	waiting       int
	waitingTokens int
	activeBlocks  int
}

var _ engine.Engine = (*Engine)(nil)

// New returns a simulated engine.
func New(cfg Config) (*Engine, error) {
	if cfg.BlockSize <= 0 || cfg.NumBlocks <= 0 || cfg.VocabSize <= 0 || cfg.ContextLength <= 0 {
		return nil, fmt.Errorf("sim: block size, blocks, vocab and context must be positive")
	}
	const layers, heads, dim = 1, 1, 8
	return &Engine{
		cfg: cfg,
		layout: engine.Layout{
			Layers: layers, KVHeads: heads, HeadDim: dim, BlockSize: cfg.BlockSize, Dtype: "f32",
			BlockBytes:  layers * 2 * heads * cfg.BlockSize * dim * 4,
			Fingerprint: fmt.Sprintf("sim/seed=%d", cfg.Seed),
		},
		events: kvcache.NewEventLog(4096),
	}, nil
}

func (e *Engine) Info() engine.Info {
	return engine.Info{
		Engine: "sim", Model: "sim", VocabSize: e.cfg.VocabSize + 1, ContextLength: e.cfg.ContextLength,
		TotalBlocks: e.cfg.NumBlocks, Layout: e.layout,
	}
}

// CachedPrefix is always 0: the simulated pool does not keep a prefix cache yet.
func (e *Engine) CachedPrefix([]uint32) int { return 0 }

func (e *Engine) Events() *kvcache.EventLog { return e.events }

func (e *Engine) Stats() engine.Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return engine.Stats{
		TotalBlocks: e.cfg.NumBlocks, FreeBlocks: e.cfg.NumBlocks - e.activeBlocks, ActiveBlocks: e.activeBlocks,
		Running: e.running, Waiting: e.waiting, WaitingTokens: e.waitingTokens,
	}
}

func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	return nil
}

func (e *Engine) blocksFor(tokens int) int { return (tokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize }

// admit reserves blocks for a sequence of up to maxLen tokens.
func (e *Engine) admit(req engine.Request) (int, error) {
	if len(req.Prompt) == 0 {
		return 0, fmt.Errorf("sim: empty prompt")
	}
	if len(req.Prompt) >= e.cfg.ContextLength {
		return 0, engine.ErrPromptTooLong
	}
	n := e.blocksFor(min(len(req.Prompt)+max(req.MaxTokens, 1), e.cfg.ContextLength))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, engine.ErrClosed
	}
	if e.activeBlocks+n > e.cfg.NumBlocks {
		return 0, engine.ErrNoBlocks
	}
	e.activeBlocks += n
	return n, nil
}

func (e *Engine) release(blocks int) {
	e.mu.Lock()
	e.activeBlocks -= blocks
	e.mu.Unlock()
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
	e.mu.Lock()
	u := float64(e.activeBlocks) / float64(e.cfg.NumBlocks)
	e.mu.Unlock()
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
	blocks, err := e.admit(req)
	if err != nil {
		return nil, err
	}
	s := e.newStream(req, blocks, 0)
	go s.run(ctx, func(ctx context.Context) error {
		_, _, err := e.prefill(ctx, len(req.Prompt))
		return err
	}, nil)
	return s, nil
}

// stream runs one sequence in its own goroutine and hands tokens over a channel.
type stream struct {
	e       *Engine
	req     engine.Request
	hash    uint64
	blocks  int
	out     chan uint32
	done    chan struct{}
	cancel  context.CancelFunc
	once    sync.Once
	finish  engine.FinishReason
	usage   engine.Usage
	err     error
	started chan struct{}
}

func (e *Engine) newStream(req engine.Request, blocks, cached int) *stream {
	return &stream{
		e: e, req: req, hash: promptHash(req.Prompt), blocks: blocks,
		out: make(chan uint32), done: make(chan struct{}), started: make(chan struct{}),
		usage: engine.Usage{PromptTokens: len(req.Prompt), CachedTokens: cached},
	}
}

// run prefills (unless first is given, from an import) and decodes until a stop
// token, max tokens, the context's end, or cancellation.
func (s *stream) run(parent context.Context, prefill func(context.Context) error, first *uint32) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	s.cancel = cancel
	close(s.started)
	defer close(s.done)
	defer s.e.release(s.blocks)
	stopParent := context.AfterFunc(parent, cancel)
	defer stopParent()
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
			s.finish, s.err = engine.FinishCancelled, err
			return
		}
	}
	maxTokens := s.req.MaxTokens
	if maxTokens <= 0 || len(s.req.Prompt)+maxTokens > s.e.cfg.ContextLength {
		maxTokens = s.e.cfg.ContextLength - len(s.req.Prompt)
	}
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
					s.finish, s.err = engine.FinishCancelled, err
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
			s.finish, s.err = engine.FinishCancelled, ctx.Err()
			return
		}
	}
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
func (s *stream) Usage() engine.Usage         { return s.usage }

func (s *stream) Close() {
	s.once.Do(func() {
		<-s.started
		s.cancel()
		<-s.done
	})
}

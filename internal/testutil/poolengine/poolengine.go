// Package poolengine is an engine.Engine for handoff benchmarks: a worker's KV pool
// and nothing else.
package poolengine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/engine/native"
	"github.com/tandem-serve/tandem/kvcache"
)

// Engine is a worker's KV pool and nothing else: blocks of a real layout, filled
// once. Its Prefill exports blocks that are "already cached" (no compute), and its
// Import copies arriving blocks into the pool, as an engine's importer does. It lets
// the handoff be timed without prefill compute, at prompt lengths past the small
// model's 8k context.
type Engine struct {
	info   engine.Info
	blocks [][]byte
	events *kvcache.EventLog
}

var _ engine.Engine = (*Engine)(nil)

// New is a pool of numBlocks blocks of layout.
func New(layout engine.Layout, numBlocks int) *Engine {
	e := &Engine{
		info: engine.Info{Engine: "pool", Model: "small", VocabSize: native.VocabSize,
			ContextLength: numBlocks*layout.BlockSize + 1, TotalBlocks: numBlocks, Layout: layout},
		blocks: make([][]byte, numBlocks),
		events: kvcache.NewEventLog(16),
	}
	// One backing array, like a real pool; KV-like contents (finite f32).
	mem := make([]byte, numBlocks*layout.BlockBytes)
	x := uint32(1)
	for i := 0; i+4 <= len(mem); i += 4 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		f := math.Float32bits(float32(int32(x)) / (1 << 31))
		mem[i], mem[i+1], mem[i+2], mem[i+3] = byte(f), byte(f>>8), byte(f>>16), byte(f>>24)
	}
	for i := range e.blocks {
		e.blocks[i] = mem[i*layout.BlockBytes : (i+1)*layout.BlockBytes : (i+1)*layout.BlockBytes]
	}
	return e
}

func (e *Engine) numBlocks(prompt []uint32) int {
	bs := e.info.Layout.BlockSize
	return (len(prompt) + bs - 1) / bs
}

func (e *Engine) Info() engine.Info                { return e.info }
func (e *Engine) CachedPrefix(prompt []uint32) int { return 0 }
func (e *Engine) Stats() engine.Stats {
	return engine.Stats{TotalBlocks: len(e.blocks), FreeBlocks: len(e.blocks)}
}
func (e *Engine) Events() *kvcache.EventLog { return e.events }
func (e *Engine) Close() error              { return nil }

func (e *Engine) Generate(context.Context, engine.Request) (engine.Stream, error) {
	return nil, errors.New("pool engine: no local generation")
}

func (e *Engine) Prefill(ctx context.Context, req engine.Request) (engine.Export, error) {
	n := e.numBlocks(req.Prompt)
	if n > len(e.blocks) {
		return nil, engine.ErrNoBlocks
	}
	return &poolExport{blocks: e.blocks[:n]}, nil
}

func (e *Engine) Import(ctx context.Context, req engine.Request, spec engine.ImportSpec) (engine.Importer, error) {
	if spec.Layout != e.info.Layout {
		return nil, engine.ErrLayoutMismatch
	}
	if spec.NumBlocks != e.numBlocks(req.Prompt) || spec.NumBlocks > len(e.blocks) {
		return nil, engine.ErrNoBlocks
	}
	return &poolImporter{e: e, spec: spec, prompt: len(req.Prompt)}, nil
}

type poolExport struct{ blocks [][]byte }

func (x *poolExport) FirstToken() uint32                   { return 42 }
func (x *poolExport) FirstLogprobs() *engine.TokenLogprobs { return nil }
func (x *poolExport) NumBlocks() int                       { return len(x.blocks) }
func (x *poolExport) CachedBlocks() int                    { return len(x.blocks) - 1 }
func (x *poolExport) QueueTime() time.Duration             { return 0 }
func (x *poolExport) PrefillTime() time.Duration           { return 0 }
func (x *poolExport) Release()                             {}
func (x *poolExport) AppendBlock(dst []byte, i int) ([]byte, error) {
	if i < 0 || i >= len(x.blocks) {
		return dst, engine.ErrBadBlock
	}
	return append(dst, x.blocks[i]...), nil
}

type poolImporter struct {
	e       *Engine
	spec    engine.ImportSpec
	prompt  int
	written int
}

func (im *poolImporter) WriteBlock(i int, data []byte) error {
	if i < im.spec.SkipBlocks || i >= im.spec.NumBlocks || len(data) != len(im.e.blocks[i]) {
		return engine.ErrBadBlock
	}
	copy(im.e.blocks[i], data)
	im.written++
	return nil
}

func (im *poolImporter) Commit(ctx context.Context) (engine.Stream, error) {
	if im.written != im.spec.NumBlocks-im.spec.SkipBlocks {
		return nil, fmt.Errorf("%w: %d of %d blocks written", engine.ErrBadBlock, im.written, im.spec.NumBlocks-im.spec.SkipBlocks)
	}
	return &oneTokenStream{tok: im.spec.FirstToken, prompt: im.prompt, cached: im.spec.SkipBlocks * im.spec.Layout.BlockSize}, nil
}

func (im *poolImporter) Abort() {}

// oneTokenStream yields the imported first token and ends, as max_tokens 1 does.
type oneTokenStream struct {
	tok            uint32
	prompt, cached int
	done           bool
}

func (s *oneTokenStream) Next(ctx context.Context) (uint32, error) {
	if s.done {
		return 0, io.EOF
	}
	s.done = true
	return s.tok, nil
}
func (s *oneTokenStream) Finish() engine.FinishReason     { return engine.FinishLength }
func (s *oneTokenStream) Logprobs() *engine.TokenLogprobs { return nil }
func (s *oneTokenStream) Usage() engine.Usage {
	return engine.Usage{PromptTokens: s.prompt, CachedTokens: s.cached, CompletionTokens: 1}
}
func (s *oneTokenStream) Close() {}

// NoLocalCache is a decode-side engine that reports nothing cached, so that every
// repetition of a prompt moves all its blocks (the real engine would otherwise find
// the previous repetition's blocks in its prefix cache and skip them).
type NoLocalCache struct{ engine.Engine }

var _ engine.Engine = NoLocalCache{}

func (NoLocalCache) CachedPrefix([]uint32) int { return 0 }

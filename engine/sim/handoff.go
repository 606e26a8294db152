package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/tandem-serve/tandem/engine"
)

// blockBytes is the simulated KV of block i: bytes derived from every prompt token up
// to the block's end, so a block that arrives damaged, out of place or from another
// prompt is detected on import exactly as real KV would be wrong.
func (e *Engine) blockBytes(dst []byte, prompt []uint32, i int) []byte {
	end := min((i+1)*e.cfg.BlockSize, len(prompt))
	h := promptHash(prompt[:end]) ^ e.cfg.Seed
	var w [8]byte
	for n := 0; n < e.layout.BlockBytes; n += 8 {
		binary.LittleEndian.PutUint64(w[:], h)
		dst = append(dst, w[:]...)
		h = xxh3.Hash(w[:])
	}
	return dst
}

func (e *Engine) Prefill(ctx context.Context, req engine.Request) (engine.Export, error) {
	sb, err := e.admit(req, 0, -1)
	if err != nil {
		return nil, err
	}
	queue, took, err := e.prefill(ctx, len(req.Prompt)-sb.cached*e.cfg.BlockSize)
	if err != nil {
		e.pool.Release(sb.ids)
		return nil, err
	}
	e.storePrompt(sb)
	return &export{e: e, prompt: req.Prompt, blocks: sb, first: e.token(promptHash(req.Prompt), req.Sampling, 0),
		queue: queue, took: took}, nil
}

type export struct {
	e           *Engine
	prompt      []uint32
	blocks      *seqBlocks
	first       uint32
	queue, took time.Duration
	once        sync.Once
}

func (x *export) FirstToken() uint32 { return x.first }

// FirstLogprobs is nil: the sim engine computes no distribution to report.
func (x *export) FirstLogprobs() *engine.TokenLogprobs { return nil }
func (x *export) NumBlocks() int                       { return x.e.blocksFor(len(x.prompt)) }
func (x *export) CachedBlocks() int                    { return 0 }
func (x *export) QueueTime() time.Duration             { return x.queue }
func (x *export) PrefillTime() time.Duration           { return x.took }
func (x *export) Release()                             { x.once.Do(func() { x.e.pool.Release(x.blocks.ids) }) }
func (x *export) AppendBlock(dst []byte, i int) ([]byte, error) {
	if i < 0 || i >= x.NumBlocks() {
		return dst, fmt.Errorf("sim: block %d out of range [0,%d)", i, x.NumBlocks())
	}
	return x.e.blockBytes(dst, x.prompt, i), nil
}

func (e *Engine) Import(ctx context.Context, req engine.Request, spec engine.ImportSpec) (engine.Importer, error) {
	if spec.Layout != e.layout {
		return nil, engine.ErrLayoutMismatch
	}
	if want := e.blocksFor(len(req.Prompt)); spec.NumBlocks != want || spec.SkipBlocks < 0 || spec.SkipBlocks >= want {
		return nil, fmt.Errorf("%w: %d blocks skipping %d for a %d-token prompt", engine.ErrBadBlock, spec.NumBlocks, spec.SkipBlocks, len(req.Prompt))
	}
	sb, err := e.admit(req, e.outputBudget(req), spec.SkipBlocks)
	if err != nil {
		return nil, err
	}
	return &importer{e: e, req: req, spec: spec, blocks: sb, got: make([]bool, spec.NumBlocks)}, nil
}

type importer struct {
	e      *Engine
	req    engine.Request
	spec   engine.ImportSpec
	blocks *seqBlocks
	got    []bool
	once   sync.Once
}

func (m *importer) WriteBlock(i int, data []byte) error {
	if i < m.spec.SkipBlocks || i >= m.spec.NumBlocks {
		return fmt.Errorf("%w: index %d outside [%d,%d)", engine.ErrBadBlock, i, m.spec.SkipBlocks, m.spec.NumBlocks)
	}
	if !bytes.Equal(data, m.e.blockBytes(nil, m.req.Prompt, i)) {
		return fmt.Errorf("%w: block %d does not hold this prompt's KV", engine.ErrBadBlock, i)
	}
	m.got[i] = true
	return nil
}

func (m *importer) Commit(ctx context.Context) (engine.Stream, error) {
	for i := m.spec.SkipBlocks; i < m.spec.NumBlocks; i++ {
		if !m.got[i] {
			m.Abort()
			return nil, fmt.Errorf("%w: block %d never arrived", engine.ErrBadBlock, i)
		}
	}
	committed := false
	m.once.Do(func() { committed = true })
	if !committed {
		return nil, fmt.Errorf("%w: import already aborted or committed", engine.ErrBadBlock)
	}
	m.e.storePrompt(m.blocks)
	s := m.e.newStream(m.req, m.blocks)
	first := m.spec.FirstToken
	go s.run(ctx, nil, &first)
	return s, nil
}

func (m *importer) Abort() { m.once.Do(func() { m.e.pool.Release(m.blocks.ids) }) }

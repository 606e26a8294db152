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

// Prefill queues the prompt on this device, under the same token budget as every
// other prefill here (waiting for its blocks first if the pool is short, as
// Generate does), and returns once its last chunk has run.
func (e *Engine) Prefill(ctx context.Context, req engine.Request) (engine.Export, error) {
	if err := e.check(req, 0); err != nil {
		return nil, err
	}
	s := e.newSeq(req, nil, kindPrefill)
	e.dev.enqueue(ctx, s)
	for {
		e.dev.mu.Lock()
		done, serr := s.done, s.err
		e.dev.mu.Unlock()
		if done {
			if serr != nil {
				return nil, serr
			}
			break
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			e.dev.cancel(s, ctx.Err())
		}
	}
	return &export{e: e, prompt: req.Prompt, blocks: s.blocks, first: e.token(s.hash, req.Sampling, 0),
		queue: s.started.Sub(s.enqueued), took: s.ended.Sub(s.started)}, nil
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
func (x *export) Release()                             { x.once.Do(func() { x.e.release(x.blocks.ids) }) }
func (x *export) AppendBlock(dst []byte, i int) ([]byte, error) {
	if i < 0 || i >= x.NumBlocks() {
		return dst, fmt.Errorf("sim: block %d out of range [0,%d)", i, x.NumBlocks())
	}
	return x.e.blockBytes(dst, x.prompt, i), nil
}

// Import receives a remote prefill's KV. Its last block lands the modelled
// transfer time (the link's latency plus the modelled model's KV bytes over its
// bandwidth) after the first, so the decode worker measures the transfer it would
// see on that link.
func (e *Engine) Import(ctx context.Context, req engine.Request, spec engine.ImportSpec) (engine.Importer, error) {
	if spec.Layout != e.layout {
		return nil, engine.ErrLayoutMismatch
	}
	if want := e.blocksFor(len(req.Prompt)); spec.NumBlocks != want || spec.SkipBlocks < 0 || spec.SkipBlocks >= want {
		return nil, fmt.Errorf("%w: %d blocks skipping %d for a %d-token prompt", engine.ErrBadBlock, spec.NumBlocks, spec.SkipBlocks, len(req.Prompt))
	}
	if err := e.check(req, e.outputBudget(req)); err != nil {
		return nil, err
	}
	sb, err := e.pin(req, spec.SkipBlocks)
	if err != nil {
		return nil, err
	}
	if err := e.reserve(ctx, req, sb, e.outputBudget(req), spec.BlockWait); err != nil {
		e.release(sb.ids) // cached blocks unpinned may be evicted for those waiting
		return nil, err
	}
	moved := len(req.Prompt) - spec.SkipBlocks*e.cfg.BlockSize
	return &importer{e: e, ctx: ctx, req: req, spec: spec, blocks: sb, got: make([]bool, spec.NumBlocks),
		transfer: e.scaled(e.TransferMS(moved))}, nil
}

// TransferMS is the modelled time for the KV of tokens tokens to cross the link.
func (e *Engine) TransferMS(tokens int) float64 {
	return e.cfg.Link.TransferMS(tokens, e.cfg.Profile.KVBytesPerToken)
}

type importer struct {
	e        *Engine
	ctx      context.Context
	req      engine.Request
	spec     engine.ImportSpec
	blocks   *seqBlocks
	got      []bool
	n        int
	first    time.Time
	transfer time.Duration
	once     sync.Once
}

func (m *importer) WriteBlock(i int, data []byte) error {
	if i < m.spec.SkipBlocks || i >= m.spec.NumBlocks {
		return fmt.Errorf("%w: index %d outside [%d,%d)", engine.ErrBadBlock, i, m.spec.SkipBlocks, m.spec.NumBlocks)
	}
	if !bytes.Equal(data, m.e.blockBytes(nil, m.req.Prompt, i)) {
		return fmt.Errorf("%w: block %d does not hold this prompt's KV", engine.ErrBadBlock, i)
	}
	clock := m.e.cfg.Clock
	if m.n == 0 {
		m.first = clock.Now()
	}
	if !m.got[i] {
		m.got[i] = true
		m.n++
	}
	if m.n == m.spec.NumBlocks-m.spec.SkipBlocks {
		if left := m.transfer - clock.Now().Sub(m.first); left > 0 {
			if err := clock.Sleep(m.ctx, left); err != nil {
				return err
			}
		}
	}
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
	s := m.e.newSeq(m.req, m.blocks, kindImported)
	s.decoding = true
	d := m.e.dev
	d.mu.Lock()
	s.emit(m.spec.FirstToken)
	d.mu.Unlock()
	d.enqueue(ctx, s)
	return s, nil
}

func (m *importer) Abort() { m.once.Do(func() { m.e.release(m.blocks.ids) }) }

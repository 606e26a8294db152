package native

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/kvcache"
	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

// export is a prefilled prompt whose blocks stay pinned until Release. Its full
// blocks are also in the prefix cache, shared with any sequence that hits them;
// nothing writes to a full block, so reading them here needs no lock.
type export struct {
	e       *Engine
	first   uint32
	firstLP *engine.TokenLogprobs
	blocks  []kvcache.BlockID
	cached  int
	queue   time.Duration
	prefill time.Duration

	mu       sync.Mutex
	released bool
}

func (x *export) FirstToken() uint32 { return x.first }
func (x *export) FirstLogprobs() *engine.TokenLogprobs {
	return x.firstLP
}
func (x *export) NumBlocks() int              { return len(x.blocks) }
func (x *export) CachedBlocks() int           { return x.cached }
func (x *export) QueueTime() time.Duration    { return x.queue }
func (x *export) PrefillTime() time.Duration  { return x.prefill }
func (x *export) blockFloats(i int) []float32 { return x.e.model.block(x.blocks[i]) }

// AppendBlock appends block i as little-endian f32 in the layout described at
// model.headKV.
func (x *export) AppendBlock(dst []byte, i int) ([]byte, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.released {
		return dst, errors.New("native: export already released")
	}
	if i < 0 || i >= len(x.blocks) {
		return dst, fmt.Errorf("%w: index %d of %d", engine.ErrBadBlock, i, len(x.blocks))
	}
	src := x.blockFloats(i)
	dst = slices.Grow(dst, 4*len(src))
	for _, v := range src {
		dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
	}
	return dst, nil
}

func (x *export) Release() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.released {
		return
	}
	x.released = true
	x.e.pool.Release(x.blocks)
	x.e.kick()
}

// Import pins the skipped prefix, allocates the rest of the prompt's blocks, and
// returns an Importer to fill them. If ctx ends before Commit, the import aborts.
func (e *Engine) Import(ctx context.Context, req engine.Request, spec engine.ImportSpec) (engine.Importer, error) {
	if err := e.validate(req); err != nil {
		return nil, err
	}
	if spec.Layout != e.info.Layout {
		return nil, fmt.Errorf("%w: got %+v, have %+v", engine.ErrLayoutMismatch, spec.Layout, e.info.Layout)
	}
	bs := e.cfg.BlockSize
	if want := (len(req.Prompt) + bs - 1) / bs; spec.NumBlocks != want {
		return nil, fmt.Errorf("%w: %d blocks for a %d-token prompt, want %d", engine.ErrBadBlock, spec.NumBlocks, len(req.Prompt), want)
	}
	if spec.SkipBlocks < 0 || spec.SkipBlocks > len(req.Prompt)/bs {
		return nil, fmt.Errorf("%w: skip %d of %d full blocks", engine.ErrBadBlock, spec.SkipBlocks, len(req.Prompt)/bs)
	}
	if int(spec.FirstToken) >= e.mc.VocabSize {
		return nil, fmt.Errorf("native: first token %d is outside the vocabulary", spec.FirstToken)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, engine.ErrClosed
	}
	hashes := blockhash.Hash(req.Prompt, bs)
	blocks := e.pool.Acquire(nil, hashes[:spec.SkipBlocks])
	if len(blocks) < spec.SkipBlocks {
		e.pool.Release(blocks)
		return nil, fmt.Errorf("%w: %d of %d", ErrNotCached, len(blocks), spec.SkipBlocks)
	}
	e.prefixQueries.Add(uint64(len(req.Prompt)))
	e.prefixHits.Add(uint64(len(blocks) * bs))
	blocks, err := e.allocateWaiting(ctx, spec.BlockWait, blocks, spec.NumBlocks-spec.SkipBlocks)
	if err != nil {
		e.pool.Release(blocks)
		return nil, err
	}
	im := &importer{e: e, req: req, spec: spec, blocks: blocks, hashes: hashes,
		written: make([]bool, spec.NumBlocks)}
	// Under the lock: when ctx has already ended, AfterFunc runs Abort at once
	// in another goroutine, which reads stop.
	im.mu.Lock()
	im.stop = context.AfterFunc(ctx, im.Abort)
	im.mu.Unlock()
	return im, nil
}

type importer struct {
	e      *Engine
	req    engine.Request
	spec   engine.ImportSpec
	hashes []uint64
	stop   func() bool

	mu      sync.Mutex
	blocks  []kvcache.BlockID
	written []bool
	done    bool // committed or aborted
}

func (im *importer) WriteBlock(i int, data []byte) error {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.done {
		return errors.New("native: import already committed or aborted")
	}
	if i < im.spec.SkipBlocks || i >= im.spec.NumBlocks {
		return fmt.Errorf("%w: index %d outside [%d, %d)", engine.ErrBadBlock, i, im.spec.SkipBlocks, im.spec.NumBlocks)
	}
	dst := im.e.model.block(im.blocks[i])
	if len(data) != 4*len(dst) {
		return fmt.Errorf("%w: block %d is %d bytes, want %d", engine.ErrBadBlock, i, len(data), 4*len(dst))
	}
	for j := range dst {
		v := math.Float32frombits(binary.LittleEndian.Uint32(data[4*j:]))
		if v-v != 0 { // NaN or Inf would poison every later token
			return fmt.Errorf("%w: block %d holds a non-finite value", engine.ErrBadBlock, i)
		}
		dst[j] = v
	}
	im.written[i] = true
	return nil
}

// Commit enters the prompt's full blocks into the prefix cache, emits the imported
// first token and queues the sequence to decode.
func (im *importer) Commit(ctx context.Context) (engine.Stream, error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.done {
		return nil, errors.New("native: import already committed or aborted")
	}
	for i := im.spec.SkipBlocks; i < im.spec.NumBlocks; i++ {
		if !im.written[i] {
			return nil, fmt.Errorf("%w: block %d never written", engine.ErrBadBlock, i)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	im.done = true
	im.stop()
	e, bs := im.e, im.e.cfg.BlockSize
	s := newSequence(im.req, kindImport)
	s.computed = len(im.req.Prompt)
	s.blocks = im.blocks
	s.hashes = im.hashes
	s.stored = im.spec.SkipBlocks
	s.admitted = true
	s.out.usage.CachedTokens = im.spec.SkipBlocks * bs
	s.startedAt = s.queuedAt
	var parent uint64
	if s.stored > 0 {
		parent = s.hashes[s.stored-1]
	}
	full := len(im.req.Prompt) / bs
	e.pool.Store(parent, s.blocks[s.stored:full], s.hashes[s.stored:full])
	s.stored = full

	first := im.spec.FirstToken
	st := &stream{e: e, seq: s}
	ended := engine.FinishNone
	if s.isStop(first) {
		ended = engine.FinishStop
	} else {
		s.tokens = append(s.tokens, first)
		var lp *engine.TokenLogprobs
		if s.req.Logprobs {
			lp = im.spec.FirstLogprobs
		}
		s.out.emit(first, lp)
		if e.outOfRoom(s) {
			ended = engine.FinishLength
		}
	}
	if ended != engine.FinishNone {
		e.pool.Release(s.blocks)
		s.blocks, s.state = nil, stateDone
		s.out.end(ended, nil)
		close(s.released)
		return st, nil
	}
	s.state = stateRunning
	if err := e.submit(ctx, s); err != nil {
		e.pool.Release(s.blocks)
		s.blocks, s.state = nil, stateDone
		close(s.released)
		return nil, err
	}
	return st, nil
}

func (im *importer) Abort() {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.done {
		return
	}
	im.done = true
	im.stop()
	im.e.pool.Release(im.blocks)
	im.blocks = nil
	im.e.kick()
}

// importRetry is how often an import that found the pool full looks again.
const importRetry = 5 * time.Millisecond

// allocateWaiting appends n fresh blocks to dst, waiting while the pool is full
// for up to wait, then fails with engine.ErrNoBlocks as the sim engine does. If
// ctx ends first, it fails with ctx's error instead: the wait was cut short, not
// found wanting, and the caller must see why (a client gone is no refusal for
// lack of blocks, and a handoff out of time falls back; engine.ErrNoBlocks
// makes the decode worker refuse the request). A local request waits for blocks in the scheduler's queue; an
// import failing at once instead would make the decode worker refuse the request
// (a local prefill would need the same blocks) when sequences finishing in the
// next few steps would have made room for KV that is already computed. Blocks are freed by sequences ending anywhere in the engine
// without a signal to waiters outside the scheduler, hence the polling; a few
// milliseconds is little next to a handoff, and ctx (the remote prefill's
// deadline) bounds the wait.
func (e *Engine) allocateWaiting(ctx context.Context, wait time.Duration, dst []kvcache.BlockID, n int) ([]kvcache.BlockID, error) {
	if out, ok := e.pool.Allocate(dst, n); ok {
		return out, nil
	}
	if wait <= 0 {
		return dst, fmt.Errorf("%w: import needs %d", engine.ErrNoBlocks, n)
	}
	e.importWaiters.Add(1)
	defer e.importWaiters.Add(-1)
	tick := time.NewTicker(importRetry)
	defer tick.Stop()
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		select {
		case <-ctx.Done():
			err := ctx.Err()
			if cause := context.Cause(ctx); cause != err {
				err = fmt.Errorf("%w (%v)", err, cause)
			}
			return dst, fmt.Errorf("native: import waited for %d free KV blocks until its context ended: %w", n, err)
		case <-timeout.C:
			return dst, fmt.Errorf("%w: import needs %d, none came free in %v", engine.ErrNoBlocks, n, wait)
		case <-e.done:
			return dst, engine.ErrClosed
		case <-tick.C:
		}
		if out, ok := e.pool.Allocate(dst, n); ok {
			return out, nil
		}
	}
}

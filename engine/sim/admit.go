package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/kvcache"
)

// The admission queue: requests that could not have their KV blocks when they
// arrived wait here, in arrival order, instead of failing, as a real engine keeps
// a request it cannot schedule yet in its waiting queue. A sequence holds blocks
// for its prompt and all the tokens it may produce from admission on, so a running
// sequence never runs short of blocks and nothing is ever preempted (docs/SIM.md).

// admission is one request waiting for blocks: a prompt to prefill on this device
// (s), or KV a remote prefill is about to hand over (imp).
type admission struct {
	s   *seq
	imp *importWait
}

// importWait is an import waiting for blocks. Its skip blocks are pinned while it
// waits: the decode worker told the prefill worker not to send them.
type importWait struct {
	req       engine.Request
	sb        *seqBlocks
	maxTokens int
	ready     chan struct{} // closed once granted
	granted   bool
	left      bool // gave up (deadline, cancellation, close)
}

// gone reports whether a waiting request no longer wants its blocks.
func (a *admission) gone() bool {
	if a.s != nil {
		return a.s.done
	}
	return a.imp.left
}

// grantLocked admits from the head of the queue while the pool has the blocks
// the head needs, and stops at the first it does not: strictly first come first
// served, as vLLM's default scheduling policy, so that a long prompt at the head is
// not starved by shorter ones arriving behind it. Called, with the device locked,
// whenever blocks come free or a request leaves the queue.
func (d *device) grantLocked() {
	if d.closed || len(d.admitting) == 0 {
		return
	}
	n, started := 0, false
	for _, a := range d.admitting {
		if !a.gone() {
			if !d.grant(a) {
				break
			}
			started = started || a.s != nil
		}
		n++
	}
	d.admitting = slices.Delete(d.admitting, 0, n)
	if started {
		d.startLocked()
	}
}

// grant gives a the blocks it needs if the pool has them.
func (d *device) grant(a *admission) bool {
	e := d.e
	if s := a.s; s != nil {
		sb, ok := e.allocate(s.req, s.maxTokens())
		if !ok {
			return false
		}
		s.blocks = sb
		s.prefillLeft = len(s.req.Prompt) - sb.cached*e.cfg.BlockSize
		d.waiting = append(d.waiting, s)
		return true
	}
	w := a.imp
	if !e.fill(w.req, w.sb, w.maxTokens) {
		return false
	}
	w.granted = true
	close(w.ready)
	return true
}

// admittingLoad counts the requests waiting for blocks and the prompt tokens they
// will have to compute, for Stats. With the device locked.
func (d *device) admittingLoad() (waiting, tokens int) {
	for _, a := range d.admitting {
		if a.gone() {
			continue
		}
		waiting++
		if a.s != nil {
			tokens += a.s.prefillLeft
		}
	}
	return waiting, tokens
}

// reserve allocates the rest of an import's blocks (sb holds its pinned skip
// blocks). With none waiting ahead and the blocks free it takes them at once;
// else it joins the queue for at most wait (real time: the handoff's own deadline,
// which it is a share of), or until ctx ends or the engine closes, and then fails
// with ErrNoBlocks, as the native engine does, which the decode worker answers by
// refusing the request (a local prefill would need the same blocks). An import queues
// as a local prompt does, since in a real engine (vLLM's KV connectors) the decode
// side's request waits in the same scheduler queue for its blocks; the bound is
// because the prefill worker pins the KV meanwhile, and is tandem's native
// engine's too.
func (e *Engine) reserve(ctx context.Context, req engine.Request, sb *seqBlocks, maxTokens int, wait time.Duration) error {
	d := e.dev
	need := e.seqBlocksFor(len(req.Prompt), maxTokens) - sb.cached
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return engine.ErrClosed
	}
	if len(d.admitting) == 0 && e.fill(req, sb, maxTokens) {
		d.mu.Unlock()
		return nil
	}
	if wait <= 0 {
		d.mu.Unlock()
		return fmt.Errorf("%w: import needs %d", engine.ErrNoBlocks, need)
	}
	w := &importWait{req: req, sb: sb, maxTokens: maxTokens, ready: make(chan struct{})}
	d.admitting = append(d.admitting, &admission{imp: w})
	d.mu.Unlock()

	t := time.NewTimer(wait)
	defer t.Stop()
	var why error
	select {
	case <-w.ready:
	case <-ctx.Done():
		why = context.Cause(ctx)
	case <-t.C:
		why = fmt.Errorf("none came free in %v", wait)
	case <-e.closing.Done():
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if w.granted { // it may have been granted as it gave up: then it has them
		return nil
	}
	w.left = true
	d.grantLocked() // it may have been holding up the queue
	if e.closing.Err() != nil {
		return engine.ErrClosed
	}
	return fmt.Errorf("%w: import needs %d, %v", engine.ErrNoBlocks, need, why)
}

// release returns blocks to the pool and lets in whoever they make room for.
func (e *Engine) release(ids []kvcache.BlockID) {
	e.pool.Release(ids)
	e.dev.mu.Lock()
	e.dev.grantLocked()
	e.dev.mu.Unlock()
}

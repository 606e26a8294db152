package kvcache

import "sync"

// BlockID names one block of a Pool, from 0 to NumBlocks-1. An engine that stores
// tensors keeps them in arrays indexed by BlockID; the pool itself holds none.
type BlockID int32

// PoolStats is the accounting of a Pool at one instant. Total = Free + Cached + Active.
type PoolStats struct {
	Total  int
	Free   int // hold nothing reusable and are referenced by nothing
	Cached int // hold a reusable prefix (hashed) and are referenced by nothing: evictable
	Active int // referenced by at least one sequence, export or import
}

// CachedBlock is one entry of the prefix cache: a block's chained hash and the hash
// of the block before it in its sequence (0 for a sequence's first block).
type CachedBlock struct {
	Hash   uint64
	Parent uint64
}

// Snapshot is the whole prefix cache and the id of the last event it reflects, taken
// atomically: applying the log's events after LastEventID to Blocks yields the cache.
type Snapshot struct {
	LastEventID uint64
	Blocks      []CachedBlock // in no particular order
}

// Pool is the metadata of a paged KV cache: which blocks are free, who references
// them, and which hold a prefix that can be reused. It stores no tensors, so a
// computing engine and a timing simulator can share it.
//
// A block's life: Allocate hands it out with one reference. Store gives a full block
// a hash, so that Acquire can later share it with another sequence (each Acquire adds
// a reference). Release drops a reference; a block with no references left becomes
// Cached if it has a hash, Free otherwise. Allocate takes Free blocks first and then
// evicts the least recently released Cached block.
//
// Every hash that enters the cache is reported to the EventLog as Stored, and every
// hash that leaves it as Removed (or all at once as Cleared), so that a router can keep
// an exact index. The pool must be the only writer of its EventLog; that is what
// makes Snapshot atomic.
//
// A Pool is safe for concurrent use.
type Pool struct {
	mu     sync.Mutex
	events *EventLog
	n      int // blocks in the pool
	// blocks holds the state of the blocks ever handed out, ids 0 to
	// len(blocks)-1; the others are free and have never been touched. It grows
	// as Allocate first reaches them, so a pool costs what it has used, not its
	// size: a sim of a thousand workers of 65,536 blocks each would otherwise
	// hold 2.4 GB of state for blocks it never uses.
	blocks []blockMeta
	free   []BlockID          // handed out before, now unhashed and unreferenced; a stack
	byHash map[uint64]BlockID // every hashed block, referenced or not
	// lru is a circular doubly linked list of hashed, unreferenced blocks, oldest
	// first: block id's links are at index id+1, the sentinel's at 0.
	lruPrev, lruNext []int32
	lruLen           int
}

type blockMeta struct {
	ref    int32
	hashed bool
	hash   uint64
	parent uint64
}

// NewPool makes a pool of numBlocks free blocks that reports to events. A nil events
// gets a log of 4096 events.
func NewPool(numBlocks int, events *EventLog) *Pool {
	if numBlocks < 0 {
		numBlocks = 0
	}
	if events == nil {
		events = NewEventLog(4096)
	}
	return &Pool{
		events:  events,
		n:       numBlocks,
		byHash:  make(map[uint64]BlockID),
		lruPrev: []int32{0},
		lruNext: []int32{0},
	}
}

// fresh is how many blocks have never been handed out.
func (p *Pool) fresh() int { return p.n - len(p.blocks) }

// grow hands out the next never-used block, extending the state arrays by a
// chunk when they are full (doubling, so the copies cost O(1) a block).
func (p *Pool) grow() BlockID {
	id := len(p.blocks)
	if id == cap(p.blocks) {
		c := min(p.n, max(2*id, 256))
		p.blocks = append(make([]blockMeta, 0, c), p.blocks...)
		p.lruPrev = append(make([]int32, 0, c+1), p.lruPrev...)
		p.lruNext = append(make([]int32, 0, c+1), p.lruNext...)
	}
	p.blocks = append(p.blocks, blockMeta{})
	p.lruPrev = append(p.lruPrev, -1)
	p.lruNext = append(p.lruNext, -1)
	return BlockID(id)
}

// Events is the log this pool reports to.
func (p *Pool) Events() *EventLog { return p.events }

// NumBlocks is the pool's size.
func (p *Pool) NumBlocks() int { return p.n }

// Stats is the accounting now.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	free := len(p.free) + p.fresh()
	return PoolStats{
		Total:  p.n,
		Free:   free,
		Cached: p.lruLen,
		Active: p.n - free - p.lruLen,
	}
}

// Available is how many blocks Allocate could hand out now, evicting if it must.
func (p *Pool) Available() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free) + p.fresh() + p.lruLen
}

// Allocate appends n blocks, each with one reference, to dst. It takes all n or none:
// ok is false, and dst is returned unchanged, when fewer than n are available. Cached
// blocks it evicts are reported in one Removed event.
func (p *Pool) Allocate(dst []BlockID, n int) (_ []BlockID, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n > len(p.free)+p.fresh()+p.lruLen {
		return dst, false
	}
	var removed []uint64
	for range n {
		// Blocks released before, then never-used ones (in id order, as a stack
		// of every block would give them), then the least recently released cached.
		var id BlockID
		if k := len(p.free); k > 0 {
			id = p.free[k-1]
			p.free = p.free[:k-1]
		} else if p.fresh() > 0 {
			id = p.grow()
		} else {
			id = BlockID(p.lruNext[0] - 1)
			p.lruRemove(id)
			b := &p.blocks[id]
			delete(p.byHash, b.hash)
			removed = append(removed, b.hash)
			*b = blockMeta{}
		}
		p.blocks[id].ref = 1
		dst = append(dst, id)
	}
	if len(removed) > 0 {
		p.events.Append(Removed, 0, removed)
	}
	return dst, true
}

// Match counts the leading hashes that are in the cache, without pinning them or
// touching their recency. It answers "how much of this prompt is cached now".
func (p *Pool) Match(hashes []uint64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, h := range hashes {
		if _, ok := p.byHash[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// Acquire adds a reference to the cached block of each leading hash that is in the
// cache, stopping at the first that is not, and appends their ids to dst. A block
// referenced this way cannot be evicted until Released.
func (p *Pool) Acquire(dst []BlockID, hashes []uint64) []BlockID {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range hashes {
		id, ok := p.byHash[h]
		if !ok {
			break
		}
		b := &p.blocks[id]
		if b.ref == 0 {
			p.lruRemove(id)
		}
		b.ref++
		dst = append(dst, id)
	}
	return dst
}

// Store enters full blocks into the prefix cache: ids[i] holds the block whose
// chained hash is hashes[i], and parent is the hash of the block before ids[0] (0 at
// a sequence's start). The caller must hold a reference to each id. A hash already
// cached under another block keeps that block; ids[i] then stays unhashed and is
// freed on release. Newly cached hashes are reported as Stored events, one per
// contiguous run so that each event's Parent is exact.
func (p *Pool) Store(parent uint64, ids []BlockID, hashes []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	runParent, run := parent, []uint64(nil)
	flush := func() {
		if len(run) > 0 {
			p.events.Append(Stored, runParent, run)
			run = nil
		}
	}
	prev := parent
	for i, id := range ids {
		h := hashes[i]
		b := &p.blocks[id]
		_, dup := p.byHash[h]
		switch {
		case b.hashed && b.hash == h:
			// Already stored (an acquired prefix block): nothing changes.
			flush()
		case dup || b.hashed:
			flush()
		default:
			b.hashed, b.hash, b.parent = true, h, prev
			p.byHash[h] = id
			if len(run) == 0 {
				runParent = prev
			}
			run = append(run, h)
		}
		prev = h
	}
	flush()
}

// Release drops one reference from each block. ids are in sequence order: they
// enter the LRU last block first, so that a prefix's tail is evicted before its head
// (a head without its tail is still useful; a tail without its head is not).
func (p *Pool) Release(ids []BlockID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		if int(id) >= len(p.blocks) {
			panic("kvcache: release of a block never allocated")
		}
		b := &p.blocks[id]
		if b.ref <= 0 {
			panic("kvcache: release of an unreferenced block")
		}
		b.ref--
		if b.ref > 0 {
			continue
		}
		if b.hashed {
			p.lruPushBack(id)
		} else {
			p.free = append(p.free, id)
		}
	}
}

// Hash returns the hash a block is cached under, if any.
func (p *Pool) Hash(id BlockID) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.meta(id)
	return b.hash, b.hashed
}

// Refs is a block's reference count.
func (p *Pool) Refs(id BlockID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.meta(id).ref)
}

// meta is block id's state; a block never handed out has none yet.
func (p *Pool) meta(id BlockID) blockMeta {
	if id < 0 || int(id) >= p.n {
		panic("kvcache: block id out of range")
	}
	if int(id) < len(p.blocks) {
		return p.blocks[id]
	}
	return blockMeta{}
}

// Snapshot returns every cached hash and the id of the last event, atomically.
func (p *Pool) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Snapshot{LastEventID: p.events.LastID(), Blocks: make([]CachedBlock, 0, len(p.byHash))}
	for h, id := range p.byHash {
		s.Blocks = append(s.Blocks, CachedBlock{Hash: h, Parent: p.blocks[id].parent})
	}
	return s
}

// Clear empties the prefix cache and reports one Cleared event. Referenced blocks
// stay with their holders but lose their hashes, so they are freed on release.
func (p *Pool) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.lruLen > 0 {
		id := BlockID(p.lruNext[0] - 1)
		p.lruRemove(id)
		p.free = append(p.free, id)
	}
	for i := range p.blocks {
		b := &p.blocks[i]
		b.hashed, b.hash, b.parent = false, 0, 0
	}
	clear(p.byHash)
	p.events.Append(Cleared, 0, nil)
}

func (p *Pool) lruPushBack(id BlockID) {
	i := int32(id) + 1
	last := p.lruPrev[0]
	p.lruNext[last] = i
	p.lruPrev[i] = last
	p.lruNext[i] = 0
	p.lruPrev[0] = i
	p.lruLen++
}

func (p *Pool) lruRemove(id BlockID) {
	i := int32(id) + 1
	prev, next := p.lruPrev[i], p.lruNext[i]
	p.lruNext[prev] = next
	p.lruPrev[next] = prev
	p.lruPrev[i], p.lruNext[i] = -1, -1
	p.lruLen--
}

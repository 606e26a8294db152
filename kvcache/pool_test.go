package kvcache

import (
	"slices"
	"testing"

	"github.com/tandem-serve/tandem/kvcache/blockhash"
)

func checkStats(t *testing.T, p *Pool, want PoolStats) {
	t.Helper()
	if got := p.Stats(); got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
}

func TestPoolAllocateReleaseFree(t *testing.T) {
	p := NewPool(4, nil)
	ids, ok := p.Allocate(nil, 3)
	if !ok || len(ids) != 3 {
		t.Fatalf("Allocate(3) = %v, %v", ids, ok)
	}
	checkStats(t, p, PoolStats{Total: 4, Free: 1, Active: 3})
	if _, ok := p.Allocate(nil, 2); ok {
		t.Fatal("Allocate(2) with 1 free succeeded")
	}
	p.Release(ids)
	checkStats(t, p, PoolStats{Total: 4, Free: 4})
	if p.Events().LastID() != 0 {
		t.Fatal("unhashed blocks produced events")
	}
}

func TestPoolPrefixCacheAndEvents(t *testing.T) {
	log := NewEventLog(16)
	p := NewPool(4, log)
	hashes := blockhash.Hash(make([]uint32, 48), 16)
	ids, _ := p.Allocate(nil, 3)
	p.Store(0, ids[:2], hashes[:2])
	p.Store(hashes[1], ids[2:], hashes[2:])
	evs, _, ok := log.Since(0)
	if !ok || len(evs) != 2 {
		t.Fatalf("events = %+v", evs)
	}
	if evs[0].Kind != Stored || evs[0].Parent != 0 || !slices.Equal(evs[0].Hashes, hashes[:2]) {
		t.Fatalf("first event = %+v", evs[0])
	}
	if evs[1].Parent != hashes[1] || evs[1].ID != evs[0].ID+1 {
		t.Fatalf("second event = %+v", evs[1])
	}
	if n := p.Match(hashes); n != 3 {
		t.Fatalf("Match = %d, want 3", n)
	}
	// A second sequence shares the first two blocks.
	shared := p.Acquire(nil, hashes[:2])
	if !slices.Equal(shared, ids[:2]) || p.Refs(ids[0]) != 2 {
		t.Fatalf("Acquire = %v, refs %d", shared, p.Refs(ids[0]))
	}
	p.Release(ids)
	checkStats(t, p, PoolStats{Total: 4, Free: 1, Cached: 1, Active: 2})
	p.Release(shared)
	checkStats(t, p, PoolStats{Total: 4, Free: 1, Cached: 3})

	// Eviction takes the least recently released, tail of a prefix first.
	got, ok := p.Allocate(nil, 2)
	if !ok {
		t.Fatal("Allocate with evictable blocks failed")
	}
	if got[1] != ids[2] {
		t.Fatalf("evicted %v, want block %v (the tail) first", got, ids[2])
	}
	if n := p.Match(hashes); n != 2 {
		t.Fatalf("Match after evicting the tail = %d, want 2", n)
	}
	evs, _, _ = log.Since(2)
	if len(evs) != 1 || evs[0].Kind != Removed || !slices.Equal(evs[0].Hashes, hashes[2:3]) {
		t.Fatalf("eviction events = %+v", evs)
	}
	p.Release(got)
	checkStats(t, p, PoolStats{Total: 4, Free: 2, Cached: 2})
}

func TestPoolDuplicateStoreKeepsFirst(t *testing.T) {
	p := NewPool(4, nil)
	hashes := blockhash.Hash(make([]uint32, 16), 16)
	a, _ := p.Allocate(nil, 1)
	b, _ := p.Allocate(nil, 1)
	p.Store(0, a, hashes)
	p.Store(0, b, hashes)
	if p.Events().LastID() != 1 {
		t.Fatalf("duplicate store emitted an event")
	}
	p.Release(b)
	checkStats(t, p, PoolStats{Total: 4, Free: 3, Active: 1})
	p.Release(a)
	checkStats(t, p, PoolStats{Total: 4, Free: 3, Cached: 1})
}

func TestPoolSnapshotAndClear(t *testing.T) {
	p := NewPool(4, nil)
	hashes := blockhash.Hash(make([]uint32, 32), 16)
	ids, _ := p.Allocate(nil, 2)
	p.Store(0, ids, hashes)
	s := p.Snapshot()
	if s.LastEventID != 1 || len(s.Blocks) != 2 {
		t.Fatalf("snapshot = %+v", s)
	}
	for _, b := range s.Blocks {
		if b.Hash == hashes[1] && b.Parent != hashes[0] {
			t.Fatalf("parent of block 1 = %x, want %x", b.Parent, hashes[0])
		}
	}
	p.Release(ids[1:])
	p.Clear()
	checkStats(t, p, PoolStats{Total: 4, Free: 3, Active: 1})
	if p.Match(hashes) != 0 {
		t.Fatal("cache not empty after Clear")
	}
	p.Release(ids[:1])
	checkStats(t, p, PoolStats{Total: 4, Free: 4})
	evs, _, _ := p.Events().Since(1)
	if len(evs) != 1 || evs[0].Kind != Cleared {
		t.Fatalf("events after clear = %+v", evs)
	}
}

// A pool's block state grows as its blocks are first handed out: ids come in
// order, released ones first, as from a stack of every block; blocks never
// used read as free and unreferenced; and the LRU survives the growth.
func TestPoolGrowsLazily(t *testing.T) {
	const n = 1000
	p := NewPool(n, NewEventLog(64))
	if len(p.blocks) != 0 {
		t.Fatalf("a new pool holds state for %d blocks", len(p.blocks))
	}
	ids, _ := p.Allocate(nil, 3)
	p.Release(ids[1:2])
	ids, _ = p.Allocate(ids, 3)
	if want := []BlockID{0, 1, 2, 1, 3, 4}; !slices.Equal(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	if len(p.blocks) > 256 {
		t.Errorf("%d blocks in use hold state for %d", 5, len(p.blocks))
	}
	checkStats(t, p, PoolStats{Total: n, Free: n - 5, Active: 5})
	if h, ok := p.Hash(n - 1); ok || h != 0 || p.Refs(n-1) != 0 {
		t.Errorf("a never-used block: hash %d %v, refs %d", h, ok, p.Refs(n-1))
	}
	p.Release(slices.Concat(ids[:1], ids[2:]))

	// 300 cached blocks in the LRU while the pool grows past two chunks under them.
	cached, _ := p.Allocate(nil, 300)
	hashes := make([]uint64, len(cached))
	for i := range hashes {
		hashes[i] = uint64(1000 + i)
	}
	p.Store(0, cached, hashes)
	p.Release(cached)
	rest, ok := p.Allocate(nil, n-300)
	if !ok || len(p.blocks) != n || cap(p.blocks) != n {
		t.Fatalf("allocate the rest: %v; state for %d blocks (cap %d)", ok, len(p.blocks), cap(p.blocks))
	}
	checkStats(t, p, PoolStats{Total: n, Cached: 300, Active: n - 300})
	last := p.Events().LastID()
	// Release entered the run last block first, so the tail goes first.
	got, ok := p.Allocate(nil, 2)
	if !ok || !slices.Equal(got, []BlockID{cached[299], cached[298]}) {
		t.Fatalf("evicted %v, want %v", got, []BlockID{cached[299], cached[298]})
	}
	evs, _, _ := p.Events().Since(last)
	if len(evs) != 1 || evs[0].Kind != Removed || !slices.Equal(evs[0].Hashes, []uint64{1299, 1298}) {
		t.Errorf("events %+v", evs)
	}
	p.Release(rest)
	p.Release(got)
	checkStats(t, p, PoolStats{Total: n, Free: 702, Cached: 298})
}

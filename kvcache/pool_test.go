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

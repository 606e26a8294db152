package router

import (
	"errors"
	"slices"
)

// workerRef is a worker's slot in the index; slots are reused after a worker leaves.
type workerRef int32

// Index is the exact map from cached block hashes to the workers holding them, built
// only from the workers' own KV events and snapshots, never guessed at routing time.
//
// Matching relies on a property the engines guarantee: a worker holds a block only
// while it holds the block's ancestors (a block is stored after its parent, and
// eviction takes a prefix's tail before its head). The holders of a prompt's blocks
// are therefore nested, block by block, and each worker's cached prefix can be found
// by bisection instead of a walk over every block.
type Index struct {
	holders holderTable
	owned   []map[uint64]struct{} // by ref: what each worker holds
	limit   []int                 // by ref: the most blocks a worker may hold here
	free    []workerRef
	total   int
	// Scratch for Match, which partitions a copy of the first block's holders in
	// place instead of allocating at every bisection step.
	set, tmp   []workerRef
	work, next []matchGroup
	bits       []uint64 // by ref; all zero between partitions
}

// ErrOverLimit says a worker reported more cached blocks than its pool can hold.
var ErrOverLimit = errors.New("router: worker reports more cached blocks than its pool holds")

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{holders: newHolderTable()}
}

// Add makes a slot for a worker that may hold up to limit blocks.
func (ix *Index) Add(limit int) workerRef {
	var ref workerRef
	if n := len(ix.free); n > 0 {
		ref, ix.free = ix.free[n-1], ix.free[:n-1]
		ix.owned[ref], ix.limit[ref] = map[uint64]struct{}{}, limit
	} else {
		ref = workerRef(len(ix.owned))
		ix.owned = append(ix.owned, map[uint64]struct{}{})
		ix.limit = append(ix.limit, limit)
	}
	return ref
}

// Remove drops every entry of a worker and frees its slot.
func (ix *Index) Remove(ref workerRef) {
	ix.Clear(ref)
	ix.owned[ref] = nil
	ix.free = append(ix.free, ref)
}

// Blocks is the number of (block, worker) entries held.
func (ix *Index) Blocks() int { return ix.total }

// Held is how many blocks the index records for a worker.
func (ix *Index) Held(ref workerRef) int { return len(ix.owned[ref]) }

// Store records that ref holds hashes. Past the worker's limit it stops and says so:
// its memory is bounded whatever a worker claims.
func (ix *Index) Store(ref workerRef, hashes []uint64) error {
	own := ix.owned[ref]
	for _, h := range hashes {
		if _, ok := own[h]; ok {
			continue
		}
		if len(own) >= ix.limit[ref] {
			return ErrOverLimit
		}
		own[h] = struct{}{}
		if ix.holders.add(h, ref) {
			ix.total++
		}
	}
	return nil
}

// Evict records that ref no longer holds hashes.
func (ix *Index) Evict(ref workerRef, hashes []uint64) {
	own := ix.owned[ref]
	for _, h := range hashes {
		if _, ok := own[h]; !ok {
			continue
		}
		delete(own, h)
		ix.unhold(h, ref)
	}
}

func (ix *Index) unhold(h uint64, ref workerRef) {
	if ix.holders.remove(h, ref) {
		ix.total--
	}
}

// Clear drops everything ref holds.
func (ix *Index) Clear(ref workerRef) {
	for h := range ix.owned[ref] {
		ix.unhold(h, ref)
	}
	clear(ix.owned[ref])
}

// Match calls found(ref, blocks) for every worker holding at least the first of the
// prompt's chained block hashes, with the number of leading blocks it holds. It
// costs O(log(prompt blocks)) lookups per distinct prefix length among the matching
// workers, and allocates nothing once its scratch has grown. Not safe for
// concurrent use (nothing about an Index is).
//
// Its time goes in cache misses, each lookup's result deciding the next lookup. So
// the bisections of the groups of workers that part ways run side by side, a step
// of each per round, and a round first loads every slot it will probe, then their
// holder lists, so that those misses are in flight together. (Loading the slots of
// two or three steps ahead as well was slower: more work than misses saved.)
func (ix *Index) Match(hashes []uint64, found func(ref workerRef, blocks int)) {
	if len(hashes) == 0 {
		return
	}
	first := ix.holders.get(hashes[0])
	if len(first) == 0 {
		return
	}
	ix.set = append(ix.set[:0], first...)
	if n := len(ix.owned)/64 + 1; len(ix.bits) < n {
		ix.bits = make([]uint64, n)
	}
	work := append(ix.work[:0], matchGroup{0, int32(len(ix.set)), 1, int32(len(hashes))})
	next := ix.next[:0]
	for len(work) > 0 {
		for _, g := range work {
			if g.lo < g.hi {
				ix.holders.touch(hashes[(g.lo+g.hi+1)/2-1])
			}
		}
		for _, g := range work {
			if g.lo < g.hi {
				ix.holders.touchList(hashes[(g.lo+g.hi+1)/2-1])
			}
		}
		next = next[:0]
		for _, g := range work {
			if g.lo == g.hi {
				for _, r := range ix.set[g.a:g.b] {
					found(r, int(g.lo))
				}
				continue
			}
			mid := (g.lo + g.hi + 1) / 2
			out, in := ix.partition(ix.set[g.a:g.b], ix.holders.get(hashes[mid-1]))
			k := g.a + int32(len(out))
			if len(out) > 0 {
				next = append(next, matchGroup{g.a, k, g.lo, mid - 1})
			}
			if len(in) > 0 {
				next = append(next, matchGroup{k, g.b, mid, g.hi})
			}
		}
		work, next = next, work
	}
	ix.work, ix.next = work, next
}

// matchGroup: every worker in Index.set[a:b] holds at least lo blocks and at most hi.
type matchGroup struct{ a, b, lo, hi int32 }

// partition reorders the sorted set in place into the members not in the sorted
// other, then those in it, both still sorted, and returns the two parts.
func (ix *Index) partition(set, other []workerRef) (out, in []workerRef) {
	switch {
	case len(other) == 0:
		return set, set[len(set):]
	case len(other) == 1:
		// Most blocks have one holder (the tails of conversations): one search
		// and a shift.
		i, ok := slices.BinarySearch(set, other[0])
		if !ok {
			return set, set[len(set):]
		}
		r := set[i]
		copy(set[i:], set[i+1:])
		set[len(set)-1] = r
		return set[:len(set)-1], set[len(set)-1:]
	case len(other) > 16*len(set):
		// A few workers against a block that many hold, such as a shared
		// system prompt's: gallop through it.
		return ix.gallopPartition(set, other)
	}
	// Otherwise mark other in a bitset and test each member without a branch:
	// which way a member goes is as good as random, and mispredicted branches
	// were most of the cost.
	bits := ix.bits
	for _, r := range other {
		bits[uint32(r)>>6] |= 1 << (uint32(r) & 63)
	}
	tmp := slices.Grow(ix.tmp[:0], len(set))[:len(set)]
	k, m := 0, 0
	for _, r := range set {
		b := int(bits[uint32(r)>>6] >> (uint32(r) & 63) & 1)
		set[k], tmp[m] = r, r
		k, m = k+1-b, m+b
	}
	copy(set[k:], tmp[:m])
	for _, r := range other {
		bits[uint32(r)>>6] = 0
	}
	ix.tmp = tmp
	return set[:k], set[k:]
}

// gallopPartition partitions as partition does, finding each member by galloping
// through other, so that a small set costs little against a large one.
func (ix *Index) gallopPartition(set, other []workerRef) (out, in []workerRef) {
	tmp := ix.tmp[:0]
	k, j := 0, 0
	for _, r := range set {
		j = gallop(other, j, r)
		if j < len(other) && other[j] == r {
			tmp = append(tmp, r)
		} else {
			set[k] = r
			k++
		}
	}
	copy(set[k:], tmp)
	ix.tmp = tmp
	return set[:k], set[k:]
}

// gallop returns the first index at or after j whose element is >= r.
func gallop(a []workerRef, j int, r workerRef) int {
	if j >= len(a) || a[j] >= r {
		return j
	}
	step := 1
	for j+step < len(a) && a[j+step] < r {
		j += step
		step *= 2
	}
	// a[j] < r, and a[hi] >= r or hi is past the end.
	lo, hi := j+1, min(j+step, len(a))
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a[m] < r {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

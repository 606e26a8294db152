package router

import (
	"errors"
	"slices"
	"sort"
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
	holders map[uint64][]workerRef // sorted
	owned   []map[uint64]struct{}  // by ref: what each worker holds
	limit   []int                  // by ref: the most blocks a worker may hold here
	free    []workerRef
	total   int
	// Scratch for Match, which partitions a copy of the first block's holders in
	// place instead of allocating at every bisection step.
	set, tmp []workerRef
}

// ErrOverLimit says a worker reported more cached blocks than its pool can hold.
var ErrOverLimit = errors.New("router: worker reports more cached blocks than its pool holds")

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{holders: map[uint64][]workerRef{}}
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
		hs := ix.holders[h]
		i, _ := slices.BinarySearch(hs, ref)
		ix.holders[h] = slices.Insert(hs, i, ref)
		ix.total++
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
	hs := ix.holders[h]
	if i, ok := slices.BinarySearch(hs, ref); ok {
		hs = slices.Delete(hs, i, i+1)
		ix.total--
	}
	if len(hs) == 0 {
		delete(ix.holders, h)
	} else {
		ix.holders[h] = hs
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
func (ix *Index) Match(hashes []uint64, found func(ref workerRef, blocks int)) {
	if len(hashes) == 0 {
		return
	}
	first := ix.holders[hashes[0]]
	if len(first) == 0 {
		return
	}
	ix.set = append(ix.set[:0], first...)
	ix.bisect(hashes, ix.set, 1, len(hashes), found)
}

// bisect: every worker in set holds at least lo blocks and at most hi.
func (ix *Index) bisect(hashes []uint64, set []workerRef, lo, hi int, found func(workerRef, int)) {
	for lo < hi {
		mid := (lo + hi + 1) / 2
		out, in := ix.partition(set, ix.holders[hashes[mid-1]])
		switch {
		case len(out) == 0:
			lo = mid
		case len(in) == 0:
			hi = mid - 1
		default:
			ix.bisect(hashes, out, lo, mid-1, found)
			set, lo = in, mid
		}
	}
	for _, r := range set {
		found(r, lo)
	}
}

// partition reorders the sorted set in place into the members not in the sorted
// other, then those in it, both still sorted, and returns the two parts. Members are
// found by galloping through other, so a small set costs little against a large one.
func (ix *Index) partition(set, other []workerRef) (out, in []workerRef) {
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
	// a[j] < r, and a[j+step] >= r or past the end.
	hi := min(j+step, len(a))
	return j + 1 + sort.Search(hi-j-1, func(i int) bool { return a[j+1+i] >= r })
}

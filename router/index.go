package router

import "errors"

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
	m       matchScratch
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

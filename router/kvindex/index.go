// Package kvindex is the router's KV index: for each cached block hash, the
// workers that hold it (a hash table of holder lists, table.go and lists.go),
// and for a prompt's chain of block hashes, how many leading blocks each worker
// holds (match.go). It is built only from the workers' own KV events and
// snapshots, and knows nothing of routing.
package kvindex

import "errors"

// Ref is a worker's slot in the index; slots are reused after a worker leaves.
type Ref int32

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
	free    []Ref
	total   int
	m       matchScratch
	gone    []uint64 // replace's scratch: the blocks a snapshot drops
}

// ErrOverLimit says a worker reported more cached blocks than its pool can hold.
var ErrOverLimit = errors.New("router: worker reports more cached blocks than its pool holds")

// Slots is how many worker slots the index has made, live or free: a Ref is
// below it, so a slice of Slots entries can be indexed by Ref.
func (ix *Index) Slots() int { return len(ix.owned) }

// Hashes lists the blocks ref holds, in no order.
func (ix *Index) Hashes(ref Ref) []uint64 {
	out := make([]uint64, 0, len(ix.owned[ref]))
	for h := range ix.owned[ref] {
		out = append(out, h)
	}
	return out
}

// New returns an empty index.
func New() *Index {
	return &Index{holders: newHolderTable()}
}

// Add makes a slot for a worker that may hold up to limit blocks.
func (ix *Index) Add(limit int) Ref {
	var ref Ref
	if n := len(ix.free); n > 0 {
		ref, ix.free = ix.free[n-1], ix.free[:n-1]
		ix.owned[ref], ix.limit[ref] = map[uint64]struct{}{}, limit
	} else {
		ref = Ref(len(ix.owned))
		ix.owned = append(ix.owned, map[uint64]struct{}{})
		ix.limit = append(ix.limit, limit)
	}
	return ref
}

// Remove drops every entry of a worker and frees its slot.
func (ix *Index) Remove(ref Ref) {
	ix.Clear(ref)
	ix.owned[ref] = nil
	ix.free = append(ix.free, ref)
}

// Blocks is the number of (block, worker) entries held.
func (ix *Index) Blocks() int { return ix.total }

// Held is how many blocks the index records for a worker.
func (ix *Index) Held(ref Ref) int { return len(ix.owned[ref]) }

// Store records that ref holds hashes. Past the worker's limit it stops and says so:
// its memory is bounded whatever a worker claims.
func (ix *Index) Store(ref Ref, hashes []uint64) error {
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
func (ix *Index) Evict(ref Ref, hashes []uint64) {
	own := ix.owned[ref]
	for _, h := range hashes {
		if _, ok := own[h]; !ok {
			continue
		}
		delete(own, h)
		ix.unhold(h, ref)
	}
}

func (ix *Index) unhold(h uint64, ref Ref) {
	if ix.holders.remove(h, ref) {
		ix.total--
	}
}

// Clear drops everything ref holds.
func (ix *Index) Clear(ref Ref) {
	for h := range ix.owned[ref] {
		ix.unhold(h, ref)
	}
	clear(ix.owned[ref])
}

// BlockSet is a snapshot's blocks, deduplicated. It is built before the router
// takes its lock, so that applying the snapshot under the lock (Index.replace)
// costs only the entries that change in the shared table.
type BlockSet struct {
	set    map[uint64]struct{}
	hashes []uint64 // distinct, in the snapshot's order
}

func NewBlockSet(hashes []uint64) BlockSet {
	b := BlockSet{set: make(map[uint64]struct{}, len(hashes)), hashes: make([]uint64, 0, len(hashes))}
	for _, h := range hashes {
		if _, ok := b.set[h]; !ok {
			b.set[h] = struct{}{}
			b.hashes = append(b.hashes, h)
		}
	}
	return b
}

// replace makes ref hold exactly the blocks of b, which the index keeps (the
// caller must not use b again). It ends as Clear then Store would, but touches
// only the table entries that differ: a worker resending what it holds (fallen
// out of its event ring) changes nothing in the table. More blocks than the
// worker's limit change nothing and say so.
func (ix *Index) Replace(ref Ref, b BlockSet) error {
	if len(b.set) > ix.limit[ref] {
		return ErrOverLimit
	}
	old := ix.owned[ref]
	// The blocks to add, filtered in place (b.hashes is the index's now).
	add, kept := b.hashes[:0], 0
	for _, h := range b.hashes {
		if _, ok := old[h]; ok {
			kept++
		} else {
			add = append(add, h)
		}
	}
	const ahead = 8 // table loads started before they are needed (touch)
	if kept < len(old) {
		gone := ix.gone[:0]
		for h := range old {
			if _, ok := b.set[h]; !ok {
				gone = append(gone, h)
			}
		}
		for i, h := range gone {
			if i+ahead < len(gone) {
				ix.holders.touch(gone[i+ahead])
			}
			ix.unhold(h, ref)
		}
		ix.gone = gone[:0]
	}
	for i, h := range add {
		if i+ahead < len(add) {
			ix.holders.touch(add[i+ahead])
		}
		if ix.holders.add(h, ref) {
			ix.total++
		}
	}
	ix.owned[ref] = b.set
	return nil
}

package kvindex

import (
	"math/bits"
	"math/rand/v2"
)

// holderTable maps a block hash to the sorted workers holding it.
//
// It replaces a map[uint64][]Ref because routing time is spent in its lookups:
// at a million entries that map spread over tens of megabytes, and every lookup
// missed cache twice, once for the map group and once for the slice's array. Here a
// slot is 16 bytes and, for the great majority of blocks that only one worker holds
// (the tails of conversations), carries that worker itself, so a lookup touches one
// cache line. The holder lists of the other blocks share one array, so that one
// costs a single miss after its slot (a slice per list cost two, its header and its
// array). Nothing in the table is a pointer, so the GC does not scan it either.
type holderTable struct {
	slots []slot // open addressing with linear probing; the length is a power of two
	shift uint   // 64 - log2(len(slots)): home takes the top bits of the mixed hash
	live  int    // occupied slots
	seed  uint64
	lists holderLists
	one   [1]Ref // get's answer for a single holder, to allocate nothing
	sink  uint64 // what touch loads, so that the load is not dropped
}

type slot struct {
	key uint64
	// 0: empty (an occupied slot has a holder); ref+1: the one holder;
	// spilled|o: the holders are the list at o in lists.
	hold uint32
	n    uint32 // holders: Match can often decide from the count alone
}

const (
	spilled  = 1 << 31
	minSlots = 1 << 10
)

func newHolderTable() holderTable {
	// Block hashes come from prompts, which users choose, and the hash function is
	// public: a per-table random seed keeps them from aiming many at one slot.
	t := holderTable{seed: rand.Uint64() | 1}
	t.resize(minSlots)
	return t
}

func (t *holderTable) home(key uint64) int {
	hi, lo := bits.Mul64(key^t.seed, 0x9e3779b97f4a7c15)
	return int((hi ^ lo) >> t.shift)
}

// find returns key's slot, or the empty slot where it would go.
func (t *holderTable) find(key uint64) (int, bool) {
	mask := len(t.slots) - 1
	for i := t.home(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.hold == 0 {
			return i, false
		}
		if s.key == key {
			return i, true
		}
	}
}

// touch loads key's first slot and nothing more, so that the cache misses of
// several lookups known in advance are under way together before get needs them.
func (t *holderTable) touch(key uint64) {
	t.sink += t.slots[t.home(key)].key
}

// touchList, once touch's loads are done, loads the holder list of key if it has
// one. (Loading every cache line of a long list, not just its first, was no faster.)
func (t *holderTable) touchList(key uint64) {
	if i, ok := t.find(key); ok {
		if h := t.slots[i].hold; h&spilled != 0 {
			t.sink += uint64(t.lists.a[h&^spilled])
		}
	}
}

// get returns the holders of key, sorted; the slice is only valid until the next call.
func (t *holderTable) get(key uint64) []Ref { return t.getInto(key, &t.one) }

// getInto is get returning a single holder in one, so that two answers can be used
// together; the slice is valid until the table changes.
func (t *holderTable) getInto(key uint64, one *[1]Ref) []Ref {
	i, ok := t.find(key)
	if !ok {
		return nil
	}
	h := t.slots[i].hold
	if h&spilled != 0 {
		return t.lists.get(int(h &^ spilled))
	}
	one[0] = Ref(h - 1)
	return one[:]
}

// count returns how many workers hold key.
func (t *holderTable) count(key uint64) int {
	if i, ok := t.find(key); ok {
		return int(t.slots[i].n)
	}
	return 0
}

// add records ref as a holder of key and says whether it was not one already.
func (t *holderTable) add(key uint64, ref Ref) bool {
	i, ok := t.find(key)
	if !ok {
		if (t.live+1)*4 > len(t.slots)*3 {
			t.resize(len(t.slots) * 2)
			i, _ = t.find(key)
		}
		t.slots[i] = slot{key: key, hold: uint32(ref) + 1, n: 1}
		t.live++
		return true
	}
	s := &t.slots[i]
	if s.hold&spilled == 0 {
		one := Ref(s.hold - 1)
		if one == ref {
			return false
		}
		o := t.lists.alloc(1)
		t.lists.a[o], t.lists.a[o+2], t.lists.a[o+3] = 2, min(one, ref), max(one, ref)
		t.slots[i].hold, t.slots[i].n = spilled|uint32(o), 2
		return true
	}
	o, ok := t.lists.insert(int(s.hold&^spilled), ref)
	t.slots[i].hold, t.slots[i].n = spilled|uint32(o), uint32(t.lists.a[o])
	return ok
}

// remove drops ref from key's holders and says whether it was one.
func (t *holderTable) remove(key uint64, ref Ref) bool {
	i, ok := t.find(key)
	if !ok {
		return false
	}
	s := &t.slots[i]
	if s.hold&spilled == 0 {
		if Ref(s.hold-1) != ref {
			return false
		}
		t.deleteAt(i)
		return true
	}
	o, ok := t.lists.delete(int(s.hold&^spilled), ref)
	if !ok {
		return false
	}
	s.n = uint32(t.lists.a[o])
	if s.n == 1 {
		s.hold = uint32(t.lists.a[o+2]) + 1
		t.lists.release(o)
	} else {
		s.hold = spilled | uint32(o)
	}
	if t.lists.sparse() {
		t.compactLists()
	}
	return true
}

// compactLists moves every holder list to a fresh array, leaving out the room that
// lists freed.
func (t *holderTable) compactLists() {
	old := t.lists
	t.lists = holderLists{}
	for i, s := range t.slots {
		if s.hold&spilled != 0 {
			hs := old.get(int(s.hold &^ spilled))
			o := t.lists.alloc(roomFor(len(hs)))
			t.lists.a[o] = Ref(len(hs))
			copy(t.lists.a[o+2:], hs)
			t.slots[i].hold = spilled | uint32(o)
		}
	}
}

// deleteAt empties slot i, shifting back the entries after it that probed past it,
// so that no tombstones lengthen later probes.
func (t *holderTable) deleteAt(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].hold != 0; j = (j + 1) & mask {
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		h := t.home(t.slots[j].key)
		if (i < j && i < h && h <= j) || (j < i && (i < h || h <= j)) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = slot{}
	t.live--
	// Shrinking at an eighth full, to a quarter, bounds memory after workers leave
	// without resizing back and forth around one size.
	if len(t.slots) > minSlots && t.live*8 < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

func (t *holderTable) resize(n int) {
	old := t.slots
	t.slots = make([]slot, n)
	t.shift = uint(64 - bits.TrailingZeros(uint(n)))
	for _, s := range old {
		if s.hold != 0 {
			i, _ := t.find(s.key)
			t.slots[i] = s
		}
	}
}

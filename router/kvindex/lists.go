package kvindex

import (
	"math/bits"
	"slices"
)

// holderLists keeps the sorted holder lists of the blocks that several workers
// hold, all in one array. The list at offset o has its length at a[o], the log2 of
// its room at a[o+1], and its members from a[o+2].
//
// Room comes in powers of two and freed room is reused by size, so a list moves at
// most log2(workers) times as it grows. A list left a quarter full moves to half
// the room, and once lists use less than half the array the table compacts it, so
// memory follows what the workers hold.
type holderLists struct {
	a      []Ref
	unused [32][]int32 // offsets of freed room, by the log2 of its size
	used   int         // words of a taken by lists, headers included
}

// roomFor is the log2 of the room a list of n >= 2 holders is given.
func roomFor(n int) int { return bits.Len(uint(n - 1)) }

func (l *holderLists) get(o int) []Ref {
	n := int(l.a[o])
	return l.a[o+2 : o+2+n : o+2+n]
}

// alloc returns the offset of an empty list with room for 1<<k holders. It may
// move a, so offsets stay valid and slices of a do not.
func (l *holderLists) alloc(k int) int {
	size := 2 + 1<<k
	l.used += size
	var o int
	if f := l.unused[k]; len(f) > 0 {
		o = int(f[len(f)-1])
		l.unused[k] = f[:len(f)-1]
	} else {
		o = len(l.a)
		l.a = slices.Grow(l.a, size)[:o+size]
	}
	l.a[o], l.a[o+1] = 0, Ref(k)
	return o
}

func (l *holderLists) release(o int) {
	k := int(l.a[o+1])
	l.unused[k] = append(l.unused[k], int32(o))
	l.used -= 2 + 1<<k
}

// sparse says that most of a is freed room, enough of it to be worth compacting.
func (l *holderLists) sparse() bool { return len(l.a) > 1<<12 && l.used*2 < len(l.a) }

// insert adds ref to the list at o and returns where the list now is and whether
// ref was not in it already.
func (l *holderLists) insert(o int, ref Ref) (int, bool) {
	j, found := slices.BinarySearch(l.get(o), ref)
	if found {
		return o, false
	}
	n, k := int(l.a[o]), int(l.a[o+1])
	if n == 1<<k {
		p := l.alloc(k + 1)
		copy(l.a[p+2:], l.a[o+2:o+2+n])
		l.release(o)
		o = p
	}
	hs := l.a[o+2 : o+3+n]
	copy(hs[j+1:], hs[j:n])
	hs[j] = ref
	l.a[o] = Ref(n + 1)
	return o, true
}

// delete removes ref from the list at o and returns where the list now is and
// whether ref was in it.
func (l *holderLists) delete(o int, ref Ref) (int, bool) {
	hs := l.get(o)
	j, found := slices.BinarySearch(hs, ref)
	if !found {
		return o, false
	}
	n := len(hs) - 1
	copy(hs[j:], hs[j+1:])
	l.a[o] = Ref(n)
	if k := int(l.a[o+1]); k > 1 && n*4 <= 1<<k {
		p := l.alloc(k - 1)
		copy(l.a[p+2:], l.a[o+2:o+2+n])
		l.a[p] = Ref(n)
		l.release(o)
		o = p
	}
	return o, true
}

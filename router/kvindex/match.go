package kvindex

import "slices"

// Match calls found(ref, blocks) for every worker holding at least the first of the
// prompt's chained block hashes, with the number of leading blocks it holds. It
// allocates nothing once its scratch has grown. Not safe for concurrent use
// (nothing about an Index is).
//
// As a worker holds a block only with its ancestors, the holders of the prompt's
// blocks are nested: c(i), how many workers hold block i, falls as i grows, and
// those holding exactly i blocks hold block i but not block i+1. So Match finds
// where c falls by bisection on the counts alone, which the table's slots carry,
// and then reads the two holder lists at each fall. That is O(log(prompt blocks))
// probes per distinct prefix length among the matching workers, each one cache
// miss without a list to read or a set to split, plus two lists per length.
//
// The time goes in those misses, each probe deciding the next. So the bisections
// of every open interval advance a step per round, and a round loads all its slots
// before reading any, so that their misses are in flight together.
func (ix *Index) Match(hashes []uint64, found func(ref Ref, blocks int)) {
	if len(hashes) == 0 {
		return
	}
	m := &ix.m
	first := ix.holders.getInto(hashes[0], &m.one[0])
	if len(first) == 0 {
		return
	}
	if n := len(ix.owned)/64 + 1; len(m.bits) < n {
		m.bits, m.members = make([]uint64, n), make([]uint64, n)
	}
	for _, r := range first {
		m.members[r>>6] |= 1 << (r & 63)
	}
	last := int32(len(hashes))
	spans := append(m.spans[:0], span{1, last + 1, int32(len(first)), 0})
	next, falls := m.next[:0], m.falls[:0]
	for len(spans) > 0 {
		for _, s := range spans {
			if s.hi-s.lo > 1 {
				ix.holders.touch(hashes[(s.lo+s.hi)/2-1])
			}
		}
		next = next[:0]
		for _, s := range spans {
			if s.hi-s.lo == 1 {
				falls = append(falls, s.lo)
				continue
			}
			mid := (s.lo + s.hi) / 2
			c := int32(ix.holders.count(hashes[mid-1]))
			if c != s.clo {
				next = append(next, span{s.lo, mid, s.clo, c})
			}
			if c != s.chi {
				next = append(next, span{mid, s.hi, c, s.chi})
			}
		}
		spans, next = next, spans
	}
	m.spans, m.next, m.falls = spans, next, falls

	for _, i := range falls {
		ix.holders.touchList(hashes[i-1])
		if i < last {
			ix.holders.touchList(hashes[i])
		}
	}
	left := len(first)
	for _, i := range falls {
		here := ix.holders.getInto(hashes[i-1], &m.one[1])
		var beyond []Ref
		if i < last {
			beyond = ix.holders.getInto(hashes[i], &m.one[2])
		}
		// here minus beyond, both sorted. Usually one worker or a few fall among
		// dozens, so search for where the lists first differ (as beyond is here
		// less the fallers, they agree up to the first one) and stop where the
		// rest must agree, instead of merging both whole. Only members are
		// reported, once each, and only if not in beyond; should the nesting
		// fail, any worker missed is settled below.
		p := firstDifference(here, beyond)
		for j := p; p < len(here) && len(here)-p != len(beyond)-j; p++ {
			r := here[p]
			for j < len(beyond) && beyond[j] < r {
				j++
			}
			if j < len(beyond) && beyond[j] == r {
				j++
				continue
			}
			if w, b := r>>6, uint64(1)<<(r&63); m.members[w]&b != 0 {
				m.members[w] &^= b
				left--
				found(r, int(i))
			}
		}
	}
	if left == 0 {
		return
	}
	// Some member was never reported: a worker holds a block without its parent,
	// against what the engines promise. Settle those left by splitting sets, which
	// relies on the nesting only among them.
	m.splits++
	m.set = m.set[:0]
	for _, r := range first {
		if w, b := r>>6, uint64(1)<<(r&63); m.members[w]&b != 0 {
			m.members[w] &^= b
			m.set = append(m.set, r)
		}
	}
	ix.matchBySplitting(hashes, found)
}

// firstDifference returns the first index at which a and b differ, found by
// bisection as if they agreed up to it and not after.
func firstDifference(a, b []Ref) int {
	lo, hi := 0, min(len(a), len(b))
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a[m] == b[m] {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// matchScratch is what Match reuses from call to call.
type matchScratch struct {
	one         [3][1]Ref // single holders returned by the table
	spans, next []span
	falls       []int32
	members     []uint64 // by ref: the workers holding the first block, not yet reported
	bits        []uint64 // by ref; all zero between partitions
	set, tmp    []Ref
	work, nextg []matchGroup
	splits      int // calls that fell back to matchBySplitting
}

// span: c(lo) and c(hi) are known and differ, so c falls somewhere in [lo, hi).
// c(i) is how many workers hold the prompt's block i (from 1), and 0 past the end.
type span struct{ lo, hi, clo, chi int32 }

// matchBySplitting reports the blocks held by each worker of m.set, sorted, all
// of whom hold the first block, bisecting the set: a probe splits each group of
// workers by whether they hold the probed block. Each probe reads a holder list
// and splits a set, so Match uses it only when the nesting it relies on fails.
func (ix *Index) matchBySplitting(hashes []uint64, found func(ref Ref, blocks int)) {
	m := &ix.m
	work := append(m.work[:0], matchGroup{0, int32(len(m.set)), 1, int32(len(hashes))})
	next := m.nextg[:0]
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
				for _, r := range m.set[g.a:g.b] {
					found(r, int(g.lo))
				}
				continue
			}
			mid := (g.lo + g.hi + 1) / 2
			out, in := ix.partition(m.set[g.a:g.b], ix.holders.get(hashes[mid-1]))
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
	m.work, m.nextg = work, next
}

// matchGroup: every worker in set[a:b] holds at least lo blocks and at most hi.
type matchGroup struct{ a, b, lo, hi int32 }

// partition reorders the sorted set in place into the members not in other, then
// those in it, both still sorted, and returns the two parts.
func (ix *Index) partition(set, other []Ref) (out, in []Ref) {
	bits := ix.m.bits
	for _, r := range other {
		bits[uint32(r)>>6] |= 1 << (uint32(r) & 63)
	}
	tmp := slices.Grow(ix.m.tmp[:0], len(set))[:len(set)]
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
	ix.m.tmp = tmp
	return set[:k], set[k:]
}

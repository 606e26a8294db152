package tokenizer

import (
	"strings"
	"sync"
)

// GPT-2's byte-to-unicode mapping: byte-level vocabularies spell every byte as a
// printable character, the printable ASCII and Latin-1 bytes as themselves and the
// rest as U+0100 onwards in byte order ("Ġ" is the space).
var byteRune, runeByte = func() ([256]rune, map[rune]byte) {
	var br [256]rune
	rb := make(map[rune]byte, 256)
	next := rune(256)
	for b := range 256 {
		printable := '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF
		r := rune(b)
		if !printable {
			r = next
			next++
		}
		br[b] = r
		rb[r] = byte(b)
	}
	return br, rb
}()

// unByteLevel turns a byte-level token's text back into its bytes. ok is false when
// the text has a character outside the mapping (an added token spelled raw).
func unByteLevel(s string) ([]byte, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := runeByte[r]
		if !ok {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// byteLevel spells bytes with the mapping.
func byteLevel(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteRune(byteRune[c])
	}
	return sb.String()
}

// merge is what a pair of adjacent tokens becomes, and how early it applies.
type merge struct {
	rank   int32
	result uint32
}

func pairKey(left, right uint32) uint64 { return uint64(left)<<32 | uint64(right) }

// symbol is one token of a word being merged; merged-away symbols have dead set.
type symbol struct {
	id         uint32
	prev, next int32
	dead       bool
}

type candidate struct {
	rank     int32
	left     int32
	lid, rid uint32
	result   uint32
}

// before orders pairs by rank, then leftmost first: llama.cpp's and Hugging Face's
// order, so that equal pairs in a row ("aaa") merge from the left.
func (c candidate) before(o candidate) bool {
	if c.rank != o.rank {
		return c.rank < o.rank
	}
	return c.left < o.left
}

// merger holds the scratch space of one merge, reused through a pool because
// encoding a prompt merges thousands of short words.
type merger struct {
	syms  []symbol
	queue []candidate
}

var mergerPool = sync.Pool{New: func() any { return new(merger) }}

// mergeByRank applies merges to ids, a word's initial tokens, and appends the
// result to out. A symbol that is noToken (a byte the vocabulary lacks) takes part
// in no merge and is dropped.
func mergeByRank(ids []uint32, merges map[uint64]merge, out []uint32) []uint32 {
	switch len(ids) {
	case 0:
		return out
	case 1:
		if ids[0] != noID {
			out = append(out, ids[0])
		}
		return out
	}
	m := mergerPool.Get().(*merger)
	defer mergerPool.Put(m)
	m.syms = m.syms[:0]
	for i, id := range ids {
		m.syms = append(m.syms, symbol{id: id, prev: int32(i) - 1, next: int32(i) + 1})
	}
	m.syms[len(m.syms)-1].next = -1
	m.queue = m.queue[:0]
	try := func(left int32) {
		if left < 0 {
			return
		}
		right := m.syms[left].next
		if right < 0 {
			return
		}
		l, r := m.syms[left].id, m.syms[right].id
		if mg, ok := merges[pairKey(l, r)]; ok {
			m.queue = heapPush(m.queue, candidate{rank: mg.rank, left: left, lid: l, rid: r, result: mg.result})
		}
	}
	for i := range int32(len(m.syms) - 1) {
		try(i)
	}
	for len(m.queue) > 0 {
		var c candidate
		c, m.queue = heapPop(m.queue)
		ls := &m.syms[c.left]
		// A candidate is stale once either side has merged with something else.
		if ls.dead || ls.id != c.lid || ls.next < 0 || m.syms[ls.next].id != c.rid {
			continue
		}
		rs := &m.syms[ls.next]
		ls.id = c.result
		rs.dead = true
		ls.next = rs.next
		if rs.next >= 0 {
			m.syms[rs.next].prev = c.left
		}
		try(ls.prev)
		try(c.left)
	}
	for i := int32(0); i >= 0; i = m.syms[i].next {
		if id := m.syms[i].id; id != noID {
			out = append(out, id)
		}
	}
	return out
}

// noID marks a symbol with no token.
const noID = ^uint32(0)

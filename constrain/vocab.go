package constrain

import (
	"bytes"
	"slices"
)

// Vocabulary is a model's tokens as the bytes each spells, in a trie for
// computing masks. Tokens with no bytes (special and control tokens, unused ids)
// are never allowed by a mask.
type Vocabulary struct {
	size  int
	bytes [][]byte
	// The trie in preorder: node i spells the byte at depth depth[i] of its path,
	// its subtree ends before node end[i], and tokens toks[t0[i]:t0[i+1]] spell
	// exactly its path.
	edge  []byte
	depth []int32
	end   []int32
	t0    []int32
	toks  []uint32
	// maxLen is the longest token's length in bytes.
	maxLen int
}

// NewVocabulary indexes tokens (id -> bytes).
func NewVocabulary(tokens [][]byte) *Vocabulary {
	v := &Vocabulary{size: len(tokens), bytes: tokens}
	ids := make([]uint32, 0, len(tokens))
	for id, b := range tokens {
		if len(b) > 0 {
			ids = append(ids, uint32(id))
		}
	}
	slices.SortFunc(ids, func(x, y uint32) int { return bytes.Compare(tokens[x], tokens[y]) })
	var path []int32 // nodes of the current token's path
	var prev []byte
	for _, id := range ids {
		b := tokens[id]
		lcp := 0
		for lcp < len(b) && lcp < len(prev) && b[lcp] == prev[lcp] {
			lcp++
		}
		for len(path) > lcp {
			v.end[path[len(path)-1]] = int32(len(v.edge))
			path = path[:len(path)-1]
		}
		for d := lcp; d < len(b); d++ {
			path = append(path, int32(len(v.edge)))
			v.edge = append(v.edge, b[d])
			v.depth = append(v.depth, int32(d))
			v.end = append(v.end, 0)
			v.t0 = append(v.t0, int32(len(v.toks)))
		}
		v.toks = append(v.toks, id)
		v.maxLen = max(v.maxLen, len(b))
		prev = b
	}
	for _, n := range path {
		v.end[n] = int32(len(v.edge))
	}
	v.t0 = append(v.t0, int32(len(v.toks)))
	return v
}

// Size is the number of token ids.
func (v *Vocabulary) Size() int { return v.size }

// Bytes is the text of token id.
func (v *Vocabulary) Bytes(id uint32) []byte {
	if int(id) >= len(v.bytes) {
		return nil
	}
	return v.bytes[id]
}

// mask computes the tokens allowed in s: a walk of the trie in preorder, skipping
// the subtree of any prefix the automaton refuses. The caller holds a.mu.
func (a *Automaton) mask(s *state) []uint64 {
	if s.mask != nil {
		return s.mask
	}
	v := a.vocab
	m := make([]uint64, (v.size+63)/64)
	// at[d+1] is the state after the first d+1 bytes of the current path.
	at := make([]*state, v.maxLen+1)
	at[0] = s
	for i := 0; i < len(v.edge); {
		d := v.depth[i]
		from, c := at[d], v.edge[i]
		n := from.next[c] // the transition is usually known: skip the call
		if n == nil {
			n = a.step(from, c)
		}
		if n == dead {
			i = int(v.end[i])
			continue
		}
		at[d+1] = n
		for _, t := range v.toks[v.t0[i]:v.t0[i+1]] {
			m[t>>6] |= 1 << (t & 63)
		}
		i++
	}
	s.mask = m
	return m
}

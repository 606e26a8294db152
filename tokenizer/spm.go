package tokenizer

import (
	"sync"
	"unicode/utf8"
)

// SentencePiece-style merging by score, as llama.cpp's llm_tokenizer_spm does: start
// from one symbol per character, repeatedly join the adjacent pair whose joined text
// is the vocabulary token with the highest score (the leftmost on a tie), and spell
// whatever is left that is not a token as <0xNN> byte tokens.

type spmSymbol struct {
	start, size int32
	prev, next  int32
}

type spmCandidate struct {
	score       float32
	left, right int32
	size        int32
}

// before puts the highest score first, the leftmost on a tie.
func (c spmCandidate) before(o spmCandidate) bool {
	if c.score != o.score {
		return c.score > o.score
	}
	return c.left < o.left
}

type spmScratch struct {
	syms  []spmSymbol
	queue []spmCandidate
}

var spmPool = sync.Pool{New: func() any { return new(spmScratch) }}

// encodeSPM appends the tokens of s, already escaped ("▁" for space), to out.
func (v *Vocab) encodeSPM(s string, out []uint32) []uint32 {
	if s == "" {
		return out
	}
	sc := spmPool.Get().(*spmScratch)
	defer spmPool.Put(sc)
	syms := sc.syms[:0]
	for i := 0; i < len(s); {
		_, w := utf8.DecodeRuneInString(s[i:])
		n := int32(len(syms))
		syms = append(syms, spmSymbol{start: int32(i), size: int32(w), prev: n - 1, next: n + 1})
		i += w
	}
	syms[len(syms)-1].next = -1
	q := sc.queue[:0]
	try := func(left, right int32) {
		if left < 0 || right < 0 {
			return
		}
		text := s[syms[left].start : syms[right].start+syms[right].size]
		id, ok := v.mergeable(text)
		if !ok {
			return
		}
		q = heapPush(q, spmCandidate{score: v.score(id), left: left, right: right, size: int32(len(text))})
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		try(i-1, i)
	}
	for len(q) > 0 {
		var c spmCandidate
		c, q = heapPop(q)
		l, r := &syms[c.left], &syms[c.right]
		if l.size == 0 || r.size == 0 || l.size+r.size != c.size {
			continue
		}
		l.size += r.size
		r.size = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.left
		}
		try(l.prev, c.left)
		try(c.left, l.next)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		text := s[syms[i].start : syms[i].start+syms[i].size]
		if id, ok := v.mergeable(text); ok {
			out = append(out, id)
			continue
		}
		out = v.appendBytes(out, text)
	}
	sc.syms, sc.queue = syms, q
	return out
}

// encodeSPMByRank appends the tokens of s, already escaped, merging by rank as
// Hugging Face's BPE model with byte_fallback does: characters the vocabulary lacks
// become byte tokens first, then merges apply to the whole text.
func (v *Vocab) encodeSPMByRank(s string, out []uint32) []uint32 {
	ids := make([]uint32, 0, len(s))
	for i := 0; i < len(s); {
		_, w := utf8.DecodeRuneInString(s[i:])
		if id, ok := v.mergeable(s[i : i+w]); ok {
			ids = append(ids, id)
		} else {
			ids = v.appendBytes(ids, s[i:i+w])
		}
		i += w
	}
	return mergeByRank(ids, v.merges, out)
}

// appendBytes spells text as byte tokens; a byte without one becomes the unknown
// token if there is one (llama.cpp would stop with an error).
func (v *Vocab) appendBytes(out []uint32, text string) []uint32 {
	for i := 0; i < len(text); i++ {
		if id := v.byteToken[text[i]]; id != noID {
			out = append(out, id)
		} else if v.unk != NoToken {
			out = append(out, uint32(v.unk))
		}
	}
	return out
}

func (v *Vocab) score(id uint32) float32 {
	if len(v.scores) == 0 {
		return 0
	}
	return v.scores[id]
}

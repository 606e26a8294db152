package native

import (
	"slices"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/internal/randmodel"
)

// sampler draws tokens. The draw for output position k is a pure function of (seed,
// k, logits): the random number comes from hashing seed and k, never from a stream
// advanced by earlier draws, so a prefill worker and a decode worker holding the same
// logits pick the same token. Candidates are ordered by logit then by token id, so
// ties are deterministic too.
type sampler struct {
	idx   []int32
	probs []float32
	cut   []float32      // logits with min_p's tail removed
	seen  map[uint32]int // output token counts for the penalties
	mask  []float32      // logits with a constraint's forbidden tokens removed
	cands []int32        // the tokens a constraint allows, when few
}

func (s *sampler) maskBuf(n int) []float32 {
	if cap(s.mask) < n {
		s.mask = make([]float32, n)
	}
	return s.mask[:n]
}

func (s *sampler) scratch(n int) []float32 {
	if cap(s.cut) < n {
		s.cut = make([]float32, n)
	}
	return s.cut[:n]
}

func (s *sampler) counts() map[uint32]int {
	if s.seen == nil {
		s.seen = map[uint32]int{}
	}
	return s.seen
}

// uniform is the random number for output position k, in [0, 1).
func uniform(seed uint64, k int) float64 {
	x := randmodel.SplitMix(randmodel.SplitMix(seed) ^ uint64(k)*0xd1b54a32d192ed03)
	return float64(x>>11) / (1 << 53)
}

func (s *sampler) sample(logits []float32, vocab int, sp engine.Sampling, k int) uint32 {
	logits = logits[:vocab]
	if sp.Temperature <= 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return uint32(best)
	}
	inv := 1 / sp.Temperature
	mx := maxf(logits)
	u := uniform(sp.Seed, k)
	topP := sp.TopP
	if topP <= 0 || topP >= 1 {
		topP = 1
	}
	if sp.TopK <= 0 && topP == 1 {
		// Plain temperature: walk the vocabulary in id order. The exponentials
		// are expSub's, eight at a time, and the same bits as expf((v-mx)*inv)
		// one at a time: inv*(v-mx) - 0 is that product exactly.
		probs := s.grow(len(logits))
		for i, v := range logits {
			probs[i] = v - mx
		}
		expSub(probs, probs, 0, inv)
		var total float64
		for _, p := range probs {
			total += float64(p)
		}
		return uint32(pick(probs, u*total, len(probs)-1))
	}
	// Candidates in descending order: the top K, or (top-p alone) as many as the
	// nucleus needs, taken from a heap so the long tail is never sorted.
	better := func(a, b int32) bool {
		return logits[a] > logits[b] || logits[a] == logits[b] && a < b
	}
	var cands []int32
	var mass float64 // probability (of the full softmax) of the candidates
	if sp.TopK > 0 {
		cands = topK(s, logits, min(sp.TopK, len(logits)), better)
	} else {
		var total float64
		for _, v := range logits {
			total += float64(expf((v - mx) * inv))
		}
		h := s.heapAll(len(logits), better)
		for len(h) > 0 && mass < float64(topP)*total {
			c := h[0]
			h = heapPop(h, better)
			cands = append(cands, c)
			mass += float64(expf((logits[c] - mx) * inv))
		}
		s.idx = h[:0]
	}
	probs := s.grow(len(cands))
	var total float64
	for i, c := range cands {
		probs[i] = expf((logits[c] - mx) * inv)
		total += float64(probs[i])
	}
	// Top-p over the top K: keep the shortest prefix reaching topP of their mass.
	n := len(cands)
	if sp.TopK > 0 && topP < 1 {
		var acc float64
		for i, p := range probs {
			acc += float64(p)
			if acc >= float64(topP)*total {
				n = i + 1
				total = acc
				break
			}
		}
	}
	return uint32(cands[pick(probs[:n], u*total, n-1)])
}

// pick returns the first index whose running sum exceeds target (fallback when
// rounding leaves target unreached).
func pick(probs []float32, target float64, fallback int) int {
	var acc float64
	for i, p := range probs {
		acc += float64(p)
		if acc > target {
			return i
		}
	}
	return fallback
}

func (s *sampler) grow(n int) []float32 {
	if cap(s.probs) < n {
		s.probs = make([]float32, n)
	}
	return s.probs[:n]
}

// topK returns the k best ids, best first, using a k-sized heap whose root is the
// worst kept.
func topK(s *sampler, logits []float32, k int, better func(a, b int32) bool) []int32 {
	worse := func(a, b int32) bool { return better(b, a) }
	h := make([]int32, 0, k)
	for i := range logits {
		id := int32(i)
		if len(h) < k {
			h = heapPush(h, id, worse)
		} else if better(id, h[0]) {
			h[0] = id
			heapDown(h, 0, worse)
		}
	}
	slices.SortFunc(h, func(a, b int32) int {
		if better(a, b) {
			return -1
		}
		return 1
	})
	return h
}

// heapAll builds a heap of every id whose root is the best.
func (s *sampler) heapAll(n int, better func(a, b int32) bool) []int32 {
	if cap(s.idx) < n {
		s.idx = make([]int32, n)
	}
	h := s.idx[:n]
	for i := range h {
		h[i] = int32(i)
	}
	for i := n/2 - 1; i >= 0; i-- {
		heapDown(h, i, better)
	}
	return h
}

// The heaps keep at the root the element for which first(root, x) holds for all x.
func heapPush(h []int32, v int32, first func(a, b int32) bool) []int32 {
	h = append(h, v)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !first(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop(h []int32, first func(a, b int32) bool) []int32 {
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	heapDown(h, 0, first)
	return h
}

func heapDown(h []int32, i int, first func(a, b int32) bool) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && first(h[r], h[l]) {
			c = r
		}
		if !first(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

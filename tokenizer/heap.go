package tokenizer

// A binary heap on a slice, typed so that pushing a candidate does not box it into an
// interface as container/heap does: the merge loops push one candidate per pair.

type heapItem[T any] interface {
	before(T) bool
}

func heapPush[T heapItem[T]](h []T, x T) []T {
	h = append(h, x)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop[T heapItem[T]](h []T) (T, []T) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, best := 2*i+1, i
		if l < len(h) && h[l].before(h[best]) {
			best = l
		}
		if r := l + 1; r < len(h) && h[r].before(h[best]) {
			best = r
		}
		if best == i {
			break
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
	return top, h
}

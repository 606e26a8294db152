package native

import (
	"math"

	"github.com/tandem-serve/tandem/engine"
)

// logprobsOf is tok's log-probability under logits (a log-softmax over the
// vocabulary) and the top most likely tokens, ties to the lower id. It is computed
// in float64 from the logits as penalties and logit bias left them, whatever
// temperature and truncation then do with them.
func logprobsOf(logits []float32, tok uint32, top int) *engine.TokenLogprobs {
	mx := logits[0]
	for _, v := range logits[1:] {
		mx = max(mx, v)
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v - mx))
	}
	lse := float64(mx) + math.Log(sum)
	out := &engine.TokenLogprobs{Logprob: float32(float64(logits[tok]) - lse)}
	if top <= 0 {
		return out
	}
	// An insertion-sorted list of the best top ids: top is at most 20, so one pass
	// over the vocabulary with a short list beats sorting it.
	best := make([]int, 0, top)
	for i, v := range logits {
		if len(best) == top && v <= logits[best[top-1]] {
			continue
		}
		j := len(best)
		if j < top {
			best = append(best, i)
		} else {
			j = top - 1
		}
		for j > 0 && logits[best[j-1]] < v {
			best[j] = best[j-1]
			j--
		}
		best[j] = i
	}
	out.Top = make([]engine.Logprob, len(best))
	for k, i := range best {
		out.Top[k] = engine.Logprob{Token: uint32(i), Logprob: float32(float64(logits[i]) - lse)}
	}
	return out
}

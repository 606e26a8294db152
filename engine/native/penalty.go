package native

import (
	"math"

	"github.com/tandem-serve/tandem/engine"
)

// banned is the logit of a token logit_bias bans: far below any real logit, yet
// finite, so that a log-probability reported for it is still a number.
const banned = -1e30

// penalize applies sp's penalties and logit bias to logits in place, before both
// sampling and the reported log-probabilities see them. tokens are the prompt and
// the output so far; the output (from promptLen) is what OpenAI's penalties count,
// both are what vLLM's repetition penalty counts.
func penalize(logits []float32, sp engine.Sampling, tokens []uint32, promptLen int, counts map[uint32]int) {
	if rp := sp.RepetitionPenalty; rp > 0 && rp != 1 {
		seen := make(map[uint32]bool, len(tokens))
		for _, t := range tokens {
			if int(t) >= len(logits) || seen[t] {
				continue
			}
			seen[t] = true
			if logits[t] > 0 {
				logits[t] /= rp
			} else {
				logits[t] *= rp
			}
		}
	}
	if sp.PresencePenalty != 0 || sp.FrequencyPenalty != 0 {
		clear(counts)
		for _, t := range tokens[promptLen:] {
			counts[t]++
		}
		for t, c := range counts {
			if int(t) < len(logits) {
				logits[t] -= sp.FrequencyPenalty*float32(c) + sp.PresencePenalty
			}
		}
	}
	for t, b := range sp.LogitBias {
		if int(t) >= len(logits) {
			continue
		}
		if b <= engine.BanBias {
			logits[t] = banned
		} else {
			logits[t] += b
		}
	}
}

// minPCut returns logits with the tokens below min_p of the most likely one's
// probability (after temperature) set to banned, in scratch; logits are left alone
// so the reported log-probabilities stay those of the whole distribution.
func minPCut(logits, scratch []float32, minP, temperature float32) []float32 {
	mx := logits[0]
	for _, v := range logits[1:] {
		mx = max(mx, v)
	}
	// p_i / p_max = exp((l_i - l_max) / T) < min_p  <=>  l_i < l_max + T ln(min_p).
	cut := mx + temperature*float32(math.Log(float64(minP)))
	for i, v := range logits {
		if v < cut {
			scratch[i] = banned
		} else {
			scratch[i] = v
		}
	}
	return scratch
}

package openaihttp

import (
	"strconv"

	"github.com/tandem-serve/tandem/engine"
)

// setControls puts the penalties, logit bias and min_p of sp on b. OpenAI's
// logit_bias is keyed by the token id as a string; -100 bans there as here.
func setControls(b *CompletionRequest, sp engine.Sampling) {
	b.PresencePenalty, b.FrequencyPenalty, b.MinP = sp.PresencePenalty, sp.FrequencyPenalty, sp.MinP
	if rp := sp.RepetitionPenalty; rp > 0 && rp != 1 {
		b.RepetitionPenalty = rp
	}
	if len(sp.LogitBias) > 0 {
		b.LogitBias = make(map[string]float32, len(sp.LogitBias))
		for id, v := range sp.LogitBias {
			b.LogitBias[strconv.FormatUint(uint64(id), 10)] = v
		}
	}
}

package frontend

import (
	"math"
	"slices"
	"strconv"

	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// Limits on the sampling controls, as OpenAI and vLLM check them.
const (
	maxLogitBias    = 1024
	maxStopTokenIDs = 64
)

// samplingControls are the penalties, logit bias, min_p and stop token ids of a
// request, checked for range here and against the vocabulary in apply.
type samplingControls struct {
	presence, frequency, repetition, minP float32
	topK                                  uint32
	// logitBias keeps the client's keys until the vocabulary is known.
	logitBias    map[string]float64
	stopTokenIDs []uint32
	// constraint is what response_format asks the output to be; nil is free text.
	constraint *workerv1.Constraint
}

func (c *samplingControls) parse(s *samplingFields) error {
	inRange := func(v *float64, name string, lo, hi float64) (float32, error) {
		if v == nil {
			return 0, nil
		}
		if !(*v >= lo && *v <= hi) {
			return 0, invalidField(name, "%s %v is out of range; it must be between %v and %v", name, *v, lo, hi)
		}
		return float32(*v), nil
	}
	var err error
	if c.presence, err = inRange(s.PresencePenalty, "presence_penalty", -2, 2); err != nil {
		return err
	}
	if c.frequency, err = inRange(s.FrequencyPenalty, "frequency_penalty", -2, 2); err != nil {
		return err
	}
	if c.minP, err = inRange(s.MinP, "min_p", 0, 1); err != nil {
		return err
	}
	if r := s.RepetitionPenalty; r != nil {
		if !(*r > 0 && *r <= 100) {
			return invalidField("repetition_penalty", "repetition_penalty %v is out of range; it must be greater than 0 (1 is none) and at most 100", *r)
		}
		c.repetition = float32(*r)
	}
	if k := s.TopK; k != nil {
		if *k < -1 || *k > math.MaxUint32 {
			return invalidField("top_k", "top_k %d is out of range; it must be at least 1, or 0 or -1 for no cut", *k)
		}
		c.topK = uint32(max(*k, 0))
	}
	if len(s.LogitBias) > maxLogitBias {
		return invalidField("logit_bias", "logit_bias has %d entries; at most %d are allowed", len(s.LogitBias), maxLogitBias)
	}
	c.logitBias = s.LogitBias
	if len(s.StopTokenIDs) > maxStopTokenIDs {
		return invalidField("stop_token_ids", "%d stop_token_ids given; at most %d are allowed", len(s.StopTokenIDs), maxStopTokenIDs)
	}
	c.stopTokenIDs = s.StopTokenIDs
	c.constraint, err = s.ResponseFormat.constraint()
	return err
}

// apply checks the token ids against the vocabulary and sets the controls on sp.
func (c *samplingControls) apply(sp *workerv1.SamplingParams, vocab int) error {
	sp.PresencePenalty, sp.FrequencyPenalty, sp.MinP, sp.TopK = c.presence, c.frequency, c.minP, c.topK
	sp.Constraint = c.constraint
	if c.repetition != 1 {
		sp.RepetitionPenalty = c.repetition
	}
	for i, id := range c.stopTokenIDs {
		if int(id) >= vocab {
			return invalidField("stop_token_ids", "stop_token_ids[%d] %d is outside the vocabulary of %d tokens", i, id, vocab)
		}
	}
	if len(c.logitBias) == 0 {
		return nil
	}
	sp.LogitBias = make(map[uint32]float32, len(c.logitBias))
	for k, v := range c.logitBias {
		id, err := strconv.ParseUint(k, 10, 32)
		if err != nil || int(id) >= vocab {
			return invalidField("logit_bias", "logit_bias key %q is not a token id of this model (0 to %d)", k, vocab-1)
		}
		if !(v >= -100 && v <= 100) || math.IsNaN(v) {
			return invalidField("logit_bias", "logit_bias[%q] %v is out of range; it must be between -100 and 100", k, v)
		}
		if v != 0 {
			sp.LogitBias[uint32(id)] = float32(v)
		}
	}
	return nil
}

// withStops adds the client's stop tokens to the model's: they end the answer even
// with ignore_eos, as in vLLM.
func (c *samplingControls) withStops(ids []uint32) []uint32 {
	for _, id := range c.stopTokenIDs {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

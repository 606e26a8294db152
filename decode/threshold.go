package decode

import "fmt"

// ThresholdParams are the threshold policy's, which the cost, load and slo
// policies also follow before they have measured what they weigh.
type ThresholdParams struct {
	// ShortPrefillThreshold is the largest effective length prefilled locally.
	// The router's isl_threshold is another boundary, for another question
	// (which pool serves the prompt); router.Params.ISLThreshold says why the two differ.
	ShortPrefillThreshold int `json:"short_prefill_threshold"`
	// MaxPrefillQueueTokens keeps a prompt local when the best prefill worker
	// already has this many tokens queued (0: no limit), under the threshold and
	// cost policies: a long queue there costs more than a local prefill here.
	// The load policy reads it as one of its reasons to stay local; the slo
	// policy ignores it, because the queue is in its TTFT estimate.
	MaxPrefillQueueTokens int `json:"max_prefill_queue_tokens"`
}

// defaultThreshold: 128 is where a remote prefill starts to cost less than a
// local one once a few sequences decode beside it, with both workers on one
// machine as tandem up runs them.
func defaultThreshold() ThresholdParams { return ThresholdParams{ShortPrefillThreshold: 128} }

// Validate checks the threshold parameters.
func (p ThresholdParams) Validate() error {
	if p.ShortPrefillThreshold < 0 {
		return fmt.Errorf("short_prefill_threshold %d: must not be negative", p.ShortPrefillThreshold)
	}
	if p.MaxPrefillQueueTokens < 0 {
		return fmt.Errorf("max_prefill_queue_tokens %d: must not be negative", p.MaxPrefillQueueTokens)
	}
	return nil
}

// thresholdPolicy prefills locally iff the effective length is at most the threshold.
type thresholdPolicy struct{ ThresholdParams }

func (thresholdPolicy) Needs() Needs { return Needs{} }

func (t thresholdPolicy) Decide(s situation) choice { return t.queueLimit(t.threshold("", s), s) }

// threshold is the rule, with prefix on its reason for the policies that fall back on it.
func (p ThresholdParams) threshold(prefix string, s situation) choice {
	eff := s.effective()
	if eff <= p.ShortPrefillThreshold {
		return choice{reason: prefix + "below_threshold",
			detail: fmt.Sprintf("effective %d tokens (%d prompt - %d cached) <= threshold %d", eff, s.prompt, s.cached, p.ShortPrefillThreshold)}
	}
	return choice{remote: true, reason: prefix + "above_threshold",
		detail: fmt.Sprintf("effective %d tokens (%d prompt - %d cached) > threshold %d", eff, s.prompt, s.cached, p.ShortPrefillThreshold)}
}

// queueLimit keeps local a remote choice whose prefill worker already holds
// MaxPrefillQueueTokens. It does not ask whether a prefill worker is
// available: a remote choice that cannot be carried out is a fallback, and
// counted as one.
func (p ThresholdParams) queueLimit(c choice, s situation) choice {
	if c.remote && p.MaxPrefillQueueTokens > 0 && s.prefillQueued >= p.MaxPrefillQueueTokens {
		return choice{reason: "prefill_queue_full",
			detail: fmt.Sprintf("%s, but the prefill worker has %d tokens queued (limit %d)", c.detail, s.prefillQueued, p.MaxPrefillQueueTokens)}
	}
	return c
}

package decode

import "fmt"

// LoadParams are the load policy's: when a long prompt is prefilled here anyway.
type LoadParams struct {
	// LocalMaxRunning prefills a long prompt locally while at most this many
	// sequences decode here: the stall it inflicts is paid by few, and the
	// prefill pool is spared.
	LocalMaxRunning int `json:"local_max_running"`
	// LocalMaxKVUsage keeps a long prompt remote when this worker's KV pool is
	// fuller than this fraction, whatever its batch: a full pool means long
	// contexts decoding, whose steps a prefill stretches most.
	LocalMaxKVUsage float64 `json:"local_max_kv_usage"`
	// LocalMaxTokens is the longest effective prompt prefilled locally for
	// load's sake (0: no cap): a prompt of more than one step's token budget
	// stalls the batch for several steps, and the trace's longest (100k tokens)
	// for seconds.
	LocalMaxTokens int `json:"local_max_tokens"`
}

func defaultLoad() LoadParams {
	return LoadParams{LocalMaxRunning: 4, LocalMaxKVUsage: 0.5, LocalMaxTokens: 8192}
}

// Validate checks the load parameters.
func (p LoadParams) Validate() error {
	if p.LocalMaxRunning < 0 {
		return fmt.Errorf("local_max_running %d: must not be negative", p.LocalMaxRunning)
	}
	if p.LocalMaxTokens < 0 {
		return fmt.Errorf("local_max_tokens %d: must not be negative", p.LocalMaxTokens)
	}
	if !finite(p.LocalMaxKVUsage, 0, 1) {
		return fmt.Errorf("local_max_kv_usage %g: want a fraction in [0, 1]", p.LocalMaxKVUsage)
	}
	return nil
}

// loadPolicy prefills locally what is short, and also what is long while this
// worker's decode batch is small and its KV pool not full (few sequences pay
// for the stall), or while the prefill worker already holds more than
// MaxPrefillQueueTokens (its queue costs more than a local prefill): Dynamo's
// isl_or_load, seen from the decode worker, which knows its own batch and KV
// exactly.
type loadPolicy struct {
	ThresholdParams
	LoadParams
}

func (loadPolicy) Needs() Needs { return Needs{} }

func (p loadPolicy) Decide(s situation) choice {
	c := p.threshold("", s)
	if !c.remote {
		return c
	}
	eff := s.effective()
	if p.LocalMaxTokens > 0 && eff > p.LocalMaxTokens {
		return choice{remote: true, reason: "load_too_long",
			detail: fmt.Sprintf("effective %d tokens > threshold %d and > %d, the longest prefilled here for load's sake", eff,
				p.ShortPrefillThreshold, p.LocalMaxTokens)}
	}
	if s.running <= p.LocalMaxRunning && s.kvUsage <= p.LocalMaxKVUsage {
		return choice{reason: "load_decode_idle",
			detail: fmt.Sprintf("effective %d tokens > threshold %d, but only %d sequences decode here (<= %d) and KV is %.0f%% used (<= %.0f%%)",
				eff, p.ShortPrefillThreshold, s.running, p.LocalMaxRunning, 100*s.kvUsage, 100*p.LocalMaxKVUsage)}
	}
	if p.MaxPrefillQueueTokens > 0 && s.prefillQueued >= p.MaxPrefillQueueTokens && s.kvUsage <= p.LocalMaxKVUsage {
		return choice{reason: "load_prefill_busy",
			detail: fmt.Sprintf("effective %d tokens > threshold %d, but the prefill worker has %d tokens queued (>= %d) and KV here is %.0f%% used",
				eff, p.ShortPrefillThreshold, s.prefillQueued, p.MaxPrefillQueueTokens, 100*s.kvUsage)}
	}
	return choice{remote: true, reason: "load_decode_busy",
		detail: fmt.Sprintf("effective %d tokens > threshold %d and %d sequences decode here (> %d) or KV is %.0f%% used (> %.0f%%)",
			eff, p.ShortPrefillThreshold, s.running, p.LocalMaxRunning, 100*s.kvUsage, 100*p.LocalMaxKVUsage)}
}

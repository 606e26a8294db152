package decode

import "fmt"

// CostParams are the cost policy's; ITLWeight also prices the ITL penalty in
// every estimate (Estimate.ITLPenalty), which shedding reads too.
type CostParams struct {
	// ITLWeight converts the stall a local prefill inflicts on each running sequence
	// into seconds of TTFT: 0 ignores running sequences, 1 counts each one's stall
	// as fully as the new request's own wait.
	ITLWeight float64 `json:"itl_weight"`
}

func defaultCost() CostParams { return CostParams{ITLWeight: 0.25} }

// Validate checks the cost parameters.
func (p CostParams) Validate() error {
	if !finite(p.ITLWeight, 0, 100) {
		return fmt.Errorf("itl_weight %g: want a number in [0, 100]", p.ITLWeight)
	}
	return nil
}

// costPolicy compares estimated TTFT both ways, plus the inter-token latency a
// local prefill costs the sequences already decoding; the threshold before
// both paths are measured, and the prefill queue limit over both.
type costPolicy struct{ ThresholdParams }

func (costPolicy) Needs() Needs { return Needs{} }

func (p costPolicy) Decide(s situation) choice { return p.queueLimit(p.cost(s), s) }

func (p costPolicy) cost(s situation) choice {
	eff := s.effective()
	if !s.est.Warm && !s.est.LocalWarm && s.running == 0 {
		// As slo's cold start: a local prefill while nothing runs here stalls
		// no one, so it costs no ITL and is a free measurement. Without it
		// cost never warmed on the Mooncake trace, where almost no prompt is
		// under the threshold: it followed the threshold, all remote, forever.
		return choice{reason: "cost_cold_idle", detail: fmt.Sprintf("no local prefill measured yet, and nothing runs here "+
			"to stall: %d effective tokens prefilled here", eff)}
	}
	if !s.est.Warm {
		return p.threshold("cold_", s)
	}
	local := s.est.Local + s.est.ITLPenalty
	detail := fmt.Sprintf("local %.1fms (queue and prefill %.1fms + ITL penalty %.1fms) vs remote %.1fms (queue %.1fms) for %d effective tokens; "+
		"fits: local %s, remote %s",
		local*1e3, s.est.Local*1e3, s.est.ITLPenalty*1e3, s.est.Remote*1e3, s.est.RemoteQueue*1e3, eff, s.est.LocalLine, s.est.RemoteLine)
	if local <= s.est.Remote {
		return choice{reason: "cost_local_cheaper", detail: detail}
	}
	return choice{remote: true, reason: "cost_remote_cheaper", detail: detail}
}

package decode

import "github.com/tandem-serve/tandem/decode/estimate"

// situation is everything a policy may look at, all of it exact or measured;
// Service.situation builds it once per request.
type situation struct {
	aggregated bool
	prompt     int // prompt tokens
	cached     int // leading prompt tokens already in this worker's cache
	est        estimate.Estimate
	// prefillQueued is the best prefill worker's queue, as the router last saw it.
	prefillQueued int
	// running is this worker's decode batch (sequences decoding or prefilling),
	// kvUsage the fraction of its KV pool referenced by them.
	running int
	kvUsage float64
	// localQueued are prompt tokens waiting to be prefilled here; slack is the
	// TPOT budget of the sequences decoding here (only for a policy that Needs it).
	localQueued int
	slack       estimate.Slack
}

func (s situation) effective() int { return s.prompt - s.cached }

// choice is the decision and why.
type choice struct {
	remote bool
	reason string // label value
	detail string // for humans
}

// decide applies the policy p names. An aggregated worker has no choice to make.
func decide(p Params, s situation) choice {
	if s.aggregated {
		return choice{reason: "aggregated_mode", detail: "an aggregated worker prefills every prompt itself"}
	}
	return newPolicy(p).Decide(s)
}

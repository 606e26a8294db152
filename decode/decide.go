package decode

import "fmt"

// situation is everything the decision looks at, all of it exact or measured.
type situation struct {
	aggregated bool
	prompt     int // prompt tokens
	cached     int // leading prompt tokens already in this worker's cache
	est        Estimate
	// prefillQueued is the best prefill worker's queue, as the router last saw it.
	prefillQueued int
	// running is this worker's decode batch (sequences decoding or prefilling),
	// kvUsage the fraction of its KV pool referenced by them.
	running int
	kvUsage float64
	// localQueued are prompt tokens waiting to be prefilled here; slack is the
	// TPOT budget of the sequences decoding here (slo policy only).
	localQueued int
	slack       slack
}

func (s situation) effective() int { return s.prompt - s.cached }

// choice is the decision and why.
type choice struct {
	remote bool
	reason string // label value
	detail string // for humans
}

// decide applies the policy. The slo policy's remote choices ignore
// MaxPrefillQueueTokens: the prefill queue is in its TTFT estimate, and a full
// queue must not override the TPOT of the sequences decoding here. It does not ask whether a prefill worker is available:
// a remote choice that cannot be carried out is a fallback, and counted as one.
func decide(p Params, s situation) choice {
	c := policy(p, s)
	if c.remote && p.Policy != PolicyAlwaysRemote && p.Policy != PolicyLoad && p.Policy != PolicySLO && p.MaxPrefillQueueTokens > 0 && s.prefillQueued >= p.MaxPrefillQueueTokens {
		return choice{reason: "prefill_queue_full",
			detail: fmt.Sprintf("%s, but the prefill worker has %d tokens queued (limit %d)", c.detail, s.prefillQueued, p.MaxPrefillQueueTokens)}
	}
	return c
}

func policy(p Params, s situation) choice {
	eff := s.effective()
	if s.aggregated {
		return choice{reason: "aggregated_mode", detail: "an aggregated worker prefills every prompt itself"}
	}
	threshold := func(prefix string) choice {
		if eff <= p.ShortPrefillThreshold {
			return choice{reason: prefix + "below_threshold",
				detail: fmt.Sprintf("effective %d tokens (%d prompt - %d cached) <= threshold %d", eff, s.prompt, s.cached, p.ShortPrefillThreshold)}
		}
		return choice{remote: true, reason: prefix + "above_threshold",
			detail: fmt.Sprintf("effective %d tokens (%d prompt - %d cached) > threshold %d", eff, s.prompt, s.cached, p.ShortPrefillThreshold)}
	}
	switch p.Policy {
	case PolicyAlwaysLocal:
		return choice{reason: "always_local", detail: "policy always-local"}
	case PolicyAlwaysRemote:
		return choice{remote: true, reason: "always_remote", detail: "policy always-remote"}
	case PolicyLoad:
		return load(p, s, threshold)
	case PolicySLO:
		return slo(p, s, threshold)
	case PolicyCost:
		if !s.est.Warm && !s.est.LocalWarm && s.running == 0 {
			// As slo's cold start: a local prefill while nothing runs here stalls
			// no one, so it costs no ITL and is a free measurement. Without it
			// cost never warmed on the Mooncake trace, where almost no prompt is
			// under the threshold: it followed the threshold, all remote, forever.
			return choice{reason: "cost_cold_idle", detail: fmt.Sprintf("no local prefill measured yet, and nothing runs here "+
				"to stall: %d effective tokens prefilled here", eff)}
		}
		if !s.est.Warm {
			return threshold("cold_")
		}
		local := s.est.Local + s.est.ITLPenalty
		detail := fmt.Sprintf("local %.1fms (queue and prefill %.1fms + ITL penalty %.1fms) vs remote %.1fms (queue %.1fms) for %d effective tokens; "+
			"fits: local %s, remote %s",
			local*1e3, s.est.Local*1e3, s.est.ITLPenalty*1e3, s.est.Remote*1e3, s.est.RemoteQueue*1e3, eff, s.est.LocalLine, s.est.RemoteLine)
		if local <= s.est.Remote {
			return choice{reason: "cost_local_cheaper", detail: detail}
		}
		return choice{remote: true, reason: "cost_remote_cheaper", detail: detail}
	default:
		return threshold("")
	}
}

// load is the load policy: short prompts local as under threshold; a long one
// local too while the decode batch is small and the KV pool not full (few
// sequences pay for the stall), or while the prefill worker already holds more
// than MaxPrefillQueueTokens (its queue costs more than a local prefill).
func load(p Params, s situation, threshold func(string) choice) choice {
	c := threshold("")
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

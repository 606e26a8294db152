package decode

import (
	"fmt"

	"github.com/tandem-serve/tandem/engine"
)

// ShedParams are early rejection's, which applies whatever the policy.
type ShedParams struct {
	// ShedTTFTFactor refuses a request at once (ResourceExhausted, reason
	// ttft_unmeetable) when its projected TTFT on every path it could take
	// exceeds TTFTSLOMs times this factor: Mooncake's early rejection. A request
	// that will miss its TTFT anyway is better served by another worker, or by
	// the client's retry, than by a prefill whose work is wasted and whose
	// queueing delays the requests behind it. 0 is off; it never sheds on a path
	// the estimator has not measured.
	ShedTTFTFactor float64 `json:"shed_ttft_factor"`
}

// Validate checks the factor's range; Params.Validate checks that the TTFT
// objective it multiplies is set.
func (p ShedParams) Validate() error {
	if !finite(p.ShedTTFTFactor, 0, 100) {
		return fmt.Errorf("shed_ttft_factor %g: want 0 (off) or a factor in (0, 100]", p.ShedTTFTFactor)
	}
	return nil
}

// paths says which prefill paths a request could take here: local, and remote
// when this is a decode worker with a prefill worker to ask. A policy that
// never takes one (always-local, always-remote) could not have taken it.
type paths struct {
	local, remote bool
}

func pathsFor(p Params, s situation, prefillers bool) paths {
	remote := !s.aggregated && prefillers && p.Policy != PolicyAlwaysLocal
	// always-remote prefills here only as a fallback, never by choice; without a
	// prefill worker that fallback is every request's path.
	local := p.Policy != PolicyAlwaysRemote || !remote
	return paths{local: local, remote: remote}
}

// shed is Mooncake's early rejection: a refusal, before any work, of a request
// whose TTFT will miss the objective by more than ShedTTFTFactor on the path
// the decision chose and on the other path the policy could have taken. It
// says nothing (nil) unless the chosen path's estimator is warm: a cold start
// must not refuse everything on default coefficients. The other path counts
// only when it is an option and warm: a path the estimator has never measured
// here is one no policy has been taking (each sends its cold side by the
// threshold, or not at all), so the request would not go there either, and
// its projection would be the defaults'. Policy-independent: it reads the
// estimate, not the policy's reasons, which it quotes.
func shed(p Params, s situation, c choice, ps paths) *LimitError {
	if p.ShedTTFTFactor <= 0 || p.TTFTSLOMs <= 0 {
		return nil
	}
	limit := p.ShedTTFTFactor * p.TTFTSLOMs / 1e3
	remote := c.remote && ps.remote
	chosenWarm, chosen := s.est.LocalWarm, s.est.Local
	otherOK, otherWarm, other := ps.remote, s.est.RemoteWarm, s.est.Remote
	if remote {
		chosenWarm, chosen = s.est.RemoteWarm, s.est.Remote
		otherOK, otherWarm, other = ps.local, s.est.LocalWarm, s.est.Local
	}
	if !chosenWarm || chosen <= limit {
		return nil
	}
	if otherOK && otherWarm && other <= limit {
		return nil
	}
	local := fmt.Sprintf("local %.1fms (%d tokens queued here + %d effective)", s.est.Local*1e3, s.localQueued, s.effective())
	switch {
	case !ps.local:
		local = "local not an option (policy " + string(p.Policy) + ")"
	case !s.est.LocalWarm:
		local = "local not measured yet"
	}
	rem := fmt.Sprintf("remote %.1fms (queue %.1fms, %d tokens queued on the best prefill worker)", s.est.Remote*1e3, s.est.RemoteQueue*1e3, s.prefillQueued)
	switch {
	case !ps.remote:
		rem = "remote not an option"
	case !s.est.RemoteWarm:
		rem = "remote not measured yet"
	}
	path := "local"
	if remote {
		path = "remote"
	}
	return &LimitError{Reason: RejectTTFTUnmeetable, Field: "ShedTTFTFactor", Limit: fmt.Sprint(p.ShedTTFTFactor),
		Detail: fmt.Sprintf("TTFT unmeetable: projected %s, %s; the %s path chosen, and every other it could take, above %g x the TTFT SLO %.0fms "+
			"(decision %s: %s)", local, rem, path, p.ShedTTFTFactor, p.TTFTSLOMs, c.reason, c.detail)}
}

// kvPrecheck refuses a remote prefill whose KV this worker's pool could not take
// now, before a prefill worker computes it: otherwise the import finds no
// blocks seconds later (noBlocks), the prefill worker's work is wasted and the
// request has waited for nothing. need is the prompt's KV alone, the blocks it
// does not share with this worker's cache: a lower bound of what any engine
// takes for it (the sim also reserves its output), so the check errs towards
// admitting. room is every block no sequence references now, free or holding
// an evictable prefix.
//
// The rule is the pool now, not the pool when the KV arrives: blocks that
// sequences free during the prefill go, first come first served, to whatever
// is admitted meanwhile (local prompts, other imports), so what is free now is
// the fairest figure a decode worker has; and a wrong refusal costs one
// re-offer to another decode worker, a wrong admission a whole wasted prefill.
// An engine that reports no pool (TotalBlocks 0) is never refused here.
func kvPrecheck(st engine.Stats, prompt, cached, blockSize int) (need, room int, refuse bool) {
	if st.TotalBlocks <= 0 || blockSize <= 0 {
		return 0, 0, false
	}
	need = (prompt+blockSize-1)/blockSize - cached/blockSize
	room = st.TotalBlocks - st.ActiveBlocks
	return need, room, need > room
}

// kvBlocksError is kvPrecheck's refusal: the same reason as a refused import
// after the prefill (kv_blocks), said to be before it.
func (s *Service) kvBlocksError(st engine.Stats, need, room int) *LimitError {
	return &LimitError{Worker: s.cfg.WorkerID, Reason: RejectKVBlocks, Field: "KVPrecheck", Limit: "true",
		Detail: fmt.Sprintf("no room for the remote prefill's KV, refused before prefill: it needs %d blocks, and %d of %d are "+
			"not held by a running sequence (%d free, %d cached)", need, room, st.TotalBlocks, st.FreeBlocks, st.CachedBlocks)}
}

package decode

import (
	"fmt"

	"github.com/tandem-serve/tandem/decode/estimate"
)

// SLOParams are the slo policy's objectives and preference. TTFTSLOMs is also
// what shedding measures against (ShedParams), whatever the policy.
type SLOParams struct {
	// TTFTSLOMs and TPOTSLOMs are the objectives, in milliseconds of this
	// worker's clock (a sim engine's modelled time times its time scale): time
	// to first token, and the mean gap between the later tokens.
	TTFTSLOMs float64 `json:"ttft_slo_ms"`
	TPOTSLOMs float64 `json:"tpot_slo_ms"`
	// TBTSLOMs is the objective for the Mooncake paper's time between tokens
	// (the mean of a request's longest tenth of gaps), in ms of the same clock;
	// 0 leaves it out. With it set, TPOTSLOMs may be 0 (off): TBT bounds the
	// stalls TPOT averages away.
	TBTSLOMs float64 `json:"tbt_slo_ms"`
	// SLOPrefer is what the policy does with a prompt that both paths would
	// serve within its objectives. SLOPreferLocal (the default; "" is the same)
	// prefills it here while its TTFT is met, keeping the prefill pool for
	// prompts that cannot wait. SLOPreferFaster sends it where its projected
	// TTFT is lower (a prefill worker not yet measured taken to be as fast as
	// this one): the local queue then does not grow towards the objective
	// while prefill workers idle, and what is left of the objective is margin
	// for the estimate's errors.
	SLOPrefer string `json:"slo_prefer"`
}

// The slo policy's preferences (SLOParams.SLOPrefer).
const (
	SLOPreferLocal  = "local"
	SLOPreferFaster = "faster"
)

// defaultSLO: the objectives of ai-dynamo/dynamo's SLA-profiling tests for a
// long-prompt workload (TTFT 2 s, ITL 30 ms for ISL 4,000 / OSL 1,000).
func defaultSLO() SLOParams {
	return SLOParams{TTFTSLOMs: 2000, TPOTSLOMs: 30, SLOPrefer: SLOPreferLocal}
}

// Validate checks the objectives' ranges and the preference.
func (p SLOParams) Validate() error {
	for _, slo := range []struct {
		name string
		v    float64
	}{{"ttft_slo_ms", p.TTFTSLOMs}, {"tpot_slo_ms", p.TPOTSLOMs}, {"tbt_slo_ms", p.TBTSLOMs}} {
		if !finite(slo.v, 0, 3.6e6) {
			return fmt.Errorf("%s %g: want milliseconds in [0, 3600000]", slo.name, slo.v)
		}
	}
	switch p.SLOPrefer {
	case "", SLOPreferLocal, SLOPreferFaster:
	default:
		return fmt.Errorf("slo_prefer %q: want %q or %q", p.SLOPrefer, SLOPreferLocal, SLOPreferFaster)
	}
	return nil
}

// required checks what the slo policy needs set when it is in force.
func (p SLOParams) required() error {
	if p.TTFTSLOMs == 0 {
		return fmt.Errorf("ttft_slo_ms: the slo policy needs it above 0")
	}
	if p.TPOTSLOMs == 0 && p.TBTSLOMs == 0 {
		return fmt.Errorf("tpot_slo_ms, tbt_slo_ms: the slo policy needs at least one of them above 0")
	}
	return nil
}

// sloPolicy keeps the sequences decoding here within their TPOT (and TBT)
// objectives and the new prompt within its TTFT; the threshold before it has
// measured a local prefill.
type sloPolicy struct {
	ThresholdParams
	SLOParams
}

// Needs: the slack of every sequence decoding here.
func (sloPolicy) Needs() Needs { return Needs{Slack: true} }

func (p sloPolicy) Decide(s situation) choice { return slo(p, s) }

// sloSlackShare is the share of the least TPOT slack a local prefill may take:
// half, for the estimate's own error and for the stalls that other requests'
// prefills will bring before those sequences end.
const sloSlackShare = 0.5

// sloTBTShare is the share of the TBT objective a sequence's projected TBT may
// reach with a local prefill's stall: the projection takes every later gap as
// a plain step, but prompts that come after this one will stretch some of them
// too, and the stall itself is an estimate; a fifth is kept for both. Not half,
// as for TPOT: the TBT projection already charges the stall gap by gap, at
// full height, to the longest gaps the objective averages.
const sloTBTShare = 0.8

// slo is the slo policy. A local prefill stalls every sequence decoding here for
// about as long as it takes, together with the prompts already waiting here
// (they are prefilled first, in the same steps): est.Local, the fitted
// fixed cost per engine step plus the cost per token. It goes local when that
// stall fits within sloSlackShare of the least TPOT slack among the sequences
// decoding here, and (with a TBT objective) no such sequence's projected TBT
// goes past sloTBTShare of it (liveStreams.slack: a stall the mean gap absorbs
// can still fill the longest tenth of gaps the TBT averages), and its own
// TTFT estimate meets the objective, or the remote
// one does not meet it either (local then keeps the prefill pool for prompts it
// can still serve in time). Otherwise remote: the TPOT of the sequences already
// decoding comes before the TTFT of the new one.
//
// With SLOPrefer "faster", a prompt the stall budgets let here goes to the
// path whose projected TTFT is lower: the two queues balance (join the
// shortest), and neither grows towards the objective while the other idles.
// Before the remote side is measured its prefill is taken to be this
// worker's, at the prefill worker's queue.
//
// Before it has measured local prefills it has no stall to weigh: it prefills
// here while nothing decodes here (the prefill stalls no one, and teaches the
// estimator), or while nothing waits here and the prompt fits one engine step
// (it stalls the batch for one step), and follows the threshold otherwise. Before it
// has measured remote ones it takes the remote TTFT as met, so that the first
// prompts that do not fit here teach it the remote side.
func slo(p sloPolicy, s situation) choice {
	idle := s.slack.Decoding == 0
	if !s.est.LocalWarm {
		if idle {
			return choice{reason: "slo_cold_idle", detail: fmt.Sprintf("no local prefill measured yet, and no sequence decoding here "+
				"has a TPOT to keep (%d decoding, %d lost): %d effective tokens prefilled here", s.slack.Decoding, s.slack.Lost, s.effective())}
		}
		// Following the threshold while anything decodes here can keep the
		// line cold for ever: a worker whose every prompt is long sends them all
		// away, decodes what comes back, and is never idle again (one of two
		// decode workers on long-only prompts: 269 of 271 decisions cold). A
		// prompt that takes one step, with nothing waiting here, stalls the
		// batch for one step: prefilled here, to learn.
		c := p.threshold("slo_cold_", s)
		if c.remote && s.localQueued == 0 && s.effective() <= s.est.Chunk {
			return choice{reason: "slo_cold_learn", detail: fmt.Sprintf("no local prefill measured yet; nothing waits here and the prompt's "+
				"%d effective tokens fit one step (budget %d): prefilled here to learn, stalling the %d decoding for one step",
				s.effective(), s.est.Chunk, s.slack.Decoding)}
		}
		return c
	}
	ttft := p.TTFTSLOMs / 1e3
	stall := s.est.Local
	budget := sloSlackShare * s.slack.Min
	// Sequences that miss an SLO already set no budget, but do not make the
	// worker idle: while every sequence here is lost there is nothing to budget
	// a stall against, and prefilling here anyway feeds on itself, each stall
	// pushing more sequences past their TPOT.
	alive := s.slack.Decoding > s.slack.Lost
	fits := idle || (alive && stall <= budget)
	tbt := sloTBTShare * p.TBTSLOMs / 1e3
	tbtFits := idle || (alive && s.slack.TBT <= tbt)
	// A prompt that fits in the last step of the prefills already waiting here
	// adds no stretched step: the sequences' gaps are what they would be anyway.
	addsNoStep := s.localQueued > 0 && s.est.Chunk > 0 && estimate.Chunks(s.localQueued+s.effective(), s.est.Chunk) == estimate.Chunks(s.localQueued, s.est.Chunk)
	noStep := !tbtFits && alive && addsNoStep
	if noStep {
		tbtFits = true
	}
	remoteMisses := s.est.RemoteWarm && s.est.Remote > ttft
	// The TBT share is a margin for the projection's error. When the remote
	// path is projected to miss the TTFT objective and the local one to meet
	// it, sending the prompt away loses it for certain while keeping it puts
	// the sequences here at risk only past the whole objective: the whole
	// objective is the bound then, so that a projection just past the share does
	// not send a prompt to a prefill worker far behind its TTFT.
	marginal := p.TBTSLOMs > 0 && !tbtFits && alive && remoteMisses && s.est.Local <= ttft && s.slack.TBT <= p.TBTSLOMs/1e3
	budgetDetail := "no sequence decoding here has a TPOT left to keep"
	if p.TPOTSLOMs == 0 {
		budgetDetail = "no TPOT objective"
	} else if s.slack.Decoding > s.slack.Lost {
		budgetDetail = fmt.Sprintf("%.0f%% of the least TPOT slack %.1fms among %d decoding (%d lost; the tightest emitted %d, %d left; step %.2fms, TPOT SLO %.1fms)",
			100*sloSlackShare, s.slack.Min*1e3, s.slack.Decoding, s.slack.Lost, s.slack.Emitted, s.slack.Remaining, s.slack.Step*1e3, p.TPOTSLOMs)
	} else if s.slack.Decoding > 0 {
		budgetDetail = fmt.Sprintf("all %d sequences decoding here miss an SLO already: no budget to stall them by", s.slack.Decoding)
	}
	if p.TBTSLOMs > 0 {
		budgetDetail += "; " + tbtDetail(p.SLOParams, s.slack)
		if noStep {
			budgetDetail += fmt.Sprintf("; past the share, but the prompt fits in the last step of the %d tokens waiting here: no gap stretched by it", s.localQueued)
		}
	}
	remote := fmt.Sprintf("%.1fms (queue %.1fms)", s.est.Remote*1e3, s.est.RemoteQueue*1e3)
	remoteTTFT := s.est.Remote
	faster := p.SLOPrefer == SLOPreferFaster
	switch {
	case !s.est.RemoteWarm && faster:
		// Not measured: a prefill worker taken to run as this one does, at its
		// queue as the router reports it. Waiting for the TTFT objective to
		// send the first prompt there (the local rule) let the local queue
		// grow to the objective before the remote side was ever measured.
		remoteTTFT = s.est.LocalLine.Seconds(s.prefillQueued+s.effective(), s.est.Chunk)
		remote = fmt.Sprintf("not measured yet, taken as this worker's line at its %d queued tokens: %.1fms", s.prefillQueued, remoteTTFT*1e3)
	case !s.est.RemoteWarm:
		remote = "not measured yet, taken as met"
	}
	detail := fmt.Sprintf("stall %.1fms (%d queued + %d effective tokens at %s) vs %s; TTFT local %.1fms, remote %s, SLO %.0fms",
		stall*1e3, s.localQueued, s.effective(), s.est.LocalLine, budgetDetail, s.est.Local*1e3, remote, p.TTFTSLOMs)
	switch {
	case p.TPOTSLOMs > 0 && !fits:
		return choice{remote: true, reason: "slo_remote_tpot_budget", detail: detail}
	case marginal:
		return choice{reason: "slo_local_tbt_margin", detail: detail + "; the remote TTFT misses its objective and the local one meets it: " +
			"local within the whole TBT objective"}
	case p.TBTSLOMs > 0 && !tbtFits:
		return choice{remote: true, reason: "slo_remote_tbt_budget", detail: detail}
	case faster && s.est.Local <= remoteTTFT:
		return choice{reason: "slo_local_faster", detail: detail}
	case faster:
		return choice{remote: true, reason: "slo_remote_faster", detail: detail}
	case s.est.Local <= ttft:
		return choice{reason: "slo_local_fits", detail: detail}
	case remoteMisses:
		return choice{reason: "slo_local_no_ttft_either", detail: detail}
	default:
		return choice{remote: true, reason: "slo_remote_ttft", detail: detail}
	}
}

// tbtDetail explains the TBT rule: the tightest sequence's projection against
// the objective, and the stretch it assumes.
func tbtDetail(p SLOParams, sl estimate.Slack) string {
	plain := fmt.Sprintf("plain step %.2fms at batch %d (%s)", sl.Step*1e3, sl.Plain.Batch, sl.StepFrom)
	if sl.Plain.Learned && !sl.Fit {
		plain += " + the prompt's compute per step"
	}
	stretch := fmt.Sprintf("the stall as %d steps of %.1fms (%s)", sl.Steps, sl.Gap*1e3, plain)
	switch {
	case sl.Decoding == 0:
		return "TBT: nothing decoding here; " + stretch
	case sl.Decoding == sl.Lost:
		return fmt.Sprintf("TBT: all %d sequences decoding here miss an SLO already; %s", sl.Decoding, stretch)
	}
	return fmt.Sprintf("TBT: the tightest projects %.1fms vs %.0f%% of the TBT SLO %.0fms (mean of its longest %d gaps; %d emitted, %d left, "+
		"%d gaps stretched); %s", sl.TBT*1e3, 100*sloTBTShare, p.TBTSLOMs, sl.TBTK, sl.TBTEmitted, sl.TBTRemaining, sl.Stretched, stretch)
}

package decode

import (
	"math"
	"time"

	"github.com/tandem-serve/tandem/decode/estimate"
	"github.com/tandem-serve/tandem/engine"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// situation builds a policy's inputs, once, from what this worker holds and
// measures: the slack of the sequences decoding here only when pol Needs it.
func (s *Service) situation(pol Policy, p Params, st engine.Stats, prompt, cached, queued int) situation {
	info := s.eng.Info()
	bs := info.Layout.BlockSize
	sit := situation{
		aggregated: s.cfg.Mode == workerv1.WorkerMode_WORKER_MODE_AGGREGATED,
		prompt:     prompt, cached: cached, prefillQueued: queued, running: st.Running, localQueued: st.WaitingTokens,
	}
	if st.TotalBlocks > 0 {
		sit.kvUsage = float64(st.ActiveBlocks) / float64(st.TotalBlocks)
	}
	kvBytes := ((prompt+bs-1)/bs - cached/bs) * info.Layout.BlockBytes
	sit.est = s.estimator.Estimate(sit.effective(), kvBytes, st.WaitingTokens, queued, st.Running, p.ITLWeight)
	if !pol.Needs().Slack {
		return sit
	}
	// The prompts waiting here are prefilled first, in the same steps: the
	// stall (est.Local) is theirs and this one's, and so are its steps.
	// The sequences decode on in a batch of those live here and this one.
	str := estimate.Stretch{Steps: estimate.Chunks(st.WaitingTokens+sit.effective(), sit.est.Chunk), Stall: sit.est.Local,
		Compute: sit.est.LocalLine.PerToken * float64(st.WaitingTokens+sit.effective()), Plain: s.steps.At(s.live.Count() + 1)}
	if s.stepFit != nil {
		if str.Fit = s.projectSteps(st, sit, bs); str.Fit.OK {
			s.metrics.stepProjected.WithLabelValues("stretched").Set(str.Fit.Gap)
		}
		if str.Fit.PlainOK {
			s.metrics.stepProjected.WithLabelValues("plain").Set(str.Fit.Plain)
		}
	}
	sit.slack = s.live.Slack(time.Now(), p.TTFTSLOMs/1e3, p.TPOTSLOMs/1e3, p.TBTSLOMs/1e3, sit.est.LocalLine.Fixed, str)
	if sit.slack.Decoding > sit.slack.Lost && !math.IsInf(sit.slack.Min, 1) {
		s.metrics.tpotSlack.Set(sit.slack.Min)
	}
	if p.TBTSLOMs > 0 && sit.slack.Decoding > sit.slack.Lost {
		s.metrics.tbtProjected.Set(sit.slack.TBT)
	}
	return sit
}

// projectSteps asks the fit for this decision's steps: the batch the sequences
// will decode in (those live here and this one), the pool in use once this
// prompt holds its blocks, and the fullest chunk the stall will run, the
// prompt's deepest (its last) where it fills a step: the worst gap of the stall.
func (s *Service) projectSteps(st engine.Stats, sit situation, blockSize int) estimate.StepGuess {
	batch := s.live.Count() + 1
	chunk := st.WaitingTokens + sit.effective()
	if c := sit.est.Chunk; c > 0 {
		chunk = min(chunk, max(c-batch, 1)) // the decode tokens take their share of the budget
	}
	ctx := max(sit.cached+sit.effective()-chunk, 0)
	u := 0.0
	if st.TotalBlocks > 0 {
		need := (sit.prompt+blockSize-1)/blockSize - sit.cached/blockSize
		u = min(float64(st.ActiveBlocks+need)/float64(st.TotalBlocks), 1)
	}
	return s.stepFit.Project(batch, chunk, ctx, u)
}

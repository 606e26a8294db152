package decode

import (
	"github.com/tandem-serve/tandem/decode/estimate"

	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/errcode"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// pump relays tokens from the engine to the client. Tokens are sent one message
// each so that the inter-token latency the client sees is the engine's. The time to
// the first token of a local prefill teaches the estimator this worker's speed.
func (s *Service) pump(ctx context.Context, stream engine.Stream, decision *decodev1.PrefillDecision, start time.Time, localQueued int, lv *estimate.Live,
	out *connect.ServerStream[decodev1.GenerateResponse]) error {
	first := true
	last := start
	path := decision.Path.Name()
	// An engine that sends its own text (a GPU engine server in text mode) has
	// it passed on beside the ids, which are then only a guess.
	texts, _ := stream.(engine.TextStream)
	withText := false
	for {
		tok, err := stream.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return errcode.Error(err)
		}
		now := time.Now()
		lv.Token(now)
		msg := &decodev1.GenerateResponse{TokenIds: []uint32{tok}}
		if lp := stream.Logprobs(); lp != nil {
			msg.Logprobs = []*workerv1.TokenLogprobs{handoff.LogprobsProto(lp)}
		}
		if texts != nil {
			if text, ok := texts.Text(); ok {
				msg.TokenTexts, withText = []string{text}, true
			}
		}
		if first {
			ttft := now.Sub(start)
			s.metrics.ttft.WithLabelValues(path).Observe(ttft.Seconds())
			traceFirstToken(ctx, path, ttft)
			if decision.Path != decodev1.PrefillPath_PREFILL_PATH_REMOTE {
				s.estimator.ObserveLocal(int(decision.EffectiveTokens), localQueued, now.Sub(start))
			}
			msg.Prefill, msg.WorkerId, msg.WorkerMode = decision, s.cfg.WorkerID, s.cfg.Mode
			msg.PromptLogprobs = promptLogprobs(stream)
			first = false
		} else {
			gap := now.Sub(last).Seconds()
			s.metrics.itl.Observe(gap)
			// One gap in batch of all the streams': about one a step across
			// the batch, so a window of them spans many steps, not one step's
			// many streams (all stretched alike when a prefill ran in it).
			// Counted across the streams, not per stream: a stream's own
			// count reaches the batch only if it emits that many tokens, and
			// at a batch above the answers' length (300 decoding 64 tokens
			// each) no gap was ever sampled.
			if b := s.live.Count(); sampleGap(&s.gapSeq, b) {
				s.steps.Observe(b, gap)
			}
		}
		last = now
		if err := out.Send(msg); err != nil {
			return err
		}
	}
	u := stream.Usage()
	final := &decodev1.GenerateResponse{
		FinishReason: finishProto(stream.Finish()),
		Usage: &decodev1.Usage{
			PromptTokens: uint32(u.PromptTokens), CompletionTokens: uint32(u.CompletionTokens), CachedTokens: uint32(u.CachedTokens),
		},
	}
	if first {
		final.Prefill, final.WorkerId, final.WorkerMode = decision, s.cfg.WorkerID, s.cfg.Mode
		final.PromptLogprobs = promptLogprobs(stream)
	}
	s.metrics.completed.WithLabelValues(stream.Finish().String()).Inc()
	traceEnd(ctx, stream.Finish().String(), u.CompletionTokens)
	if withText {
		s.metrics.engineText.Inc()
	}
	return out.Send(final)
}

// promptLogprobs are the prompt's logprobs a stream reports, for the first message.
func promptLogprobs(stream engine.Stream) []*workerv1.TokenLogprobs {
	ps, ok := stream.(engine.PromptLogprobsStream)
	if !ok {
		return nil
	}
	lps := ps.PromptLogprobs()
	out := make([]*workerv1.TokenLogprobs, len(lps))
	for i := range lps {
		out[i] = handoff.LogprobsProto(&lps[i])
	}
	return out
}

// sampleGap says whether a gap seen while batch streams decode is the one in
// batch (counted in seq across the streams) that the step model learns from.
func sampleGap(seq *atomic.Uint64, batch int) bool {
	return batch > 0 && seq.Add(1)%uint64(batch) == 0
}

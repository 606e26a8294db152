// Package decode serves Generate on a decode (or aggregated) worker: it decides
// whether to prefill the prompt here or on a prefill worker, imports the KV when
// remote, falls back to local prefill when remote fails, and streams the tokens.
package decode

import (
	"github.com/tandem-serve/tandem/decode/estimate"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/errcode"
	"github.com/tandem-serve/tandem/internal/spans"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
)

// Config is the decode worker's identity, its starting decision parameters and
// the bounds on a remote prefill's deadline.
type Config struct {
	WorkerID string
	Mode     workerv1.WorkerMode
	Params   Params
	// MinRemoteDeadline and MaxRemoteDeadline bound the deadline derived from the
	// estimate; a remote prefill never waits longer than the max.
	MinRemoteDeadline time.Duration
	MaxRemoteDeadline time.Duration
	// MaxRunning bounds the requests this worker serves at once (0: unbounded);
	// past it Generate answers ResourceExhausted at once, and the frontend tries
	// another worker or tells the client to retry.
	MaxRunning int
	// MaxKVUsage refuses new requests, the same way, while more than this fraction
	// of the engine's KV blocks are in use (0: no limit); MaxWaitingTokens while
	// more than this many prompt tokens wait for prefill here (0: no limit).
	// Admission on load, not only on count (admission.go).
	MaxKVUsage       float64
	MaxWaitingTokens int
	// KVPrecheck refuses a request decided remote, before a prefill worker is
	// asked, when this worker's KV pool has fewer blocks not held by a running
	// sequence than the prompt's KV needs (kvPrecheck), instead of refusing it
	// after the prefill when the import finds no blocks.
	KVPrecheck bool
}

// DefaultConfig is the decode service's config unless flags say otherwise; the
// caller sets WorkerID and Mode.
func DefaultConfig() Config {
	return Config{Params: DefaultParams(), MinRemoteDeadline: 5 * time.Second, MaxRemoteDeadline: 60 * time.Second, MaxRunning: 512,
		KVPrecheck: true}
}

// Validate checks the config.
func (c Config) Validate() error {
	if c.WorkerID == "" {
		return errors.New("decode: WorkerID is required")
	}
	switch c.Mode {
	case workerv1.WorkerMode_WORKER_MODE_AGGREGATED, workerv1.WorkerMode_WORKER_MODE_DECODE:
	default:
		return fmt.Errorf("decode: mode %s cannot serve Generate", c.Mode)
	}
	if c.MinRemoteDeadline <= 0 || c.MaxRemoteDeadline < c.MinRemoteDeadline {
		return fmt.Errorf("decode: remote deadline bounds [%s, %s] are not a range", c.MinRemoteDeadline, c.MaxRemoteDeadline)
	}
	if c.MaxRunning < 0 {
		return fmt.Errorf("decode: MaxRunning %d: want 0 (no bound) or more", c.MaxRunning)
	}
	if !(c.MaxKVUsage >= 0 && c.MaxKVUsage <= 1) {
		return fmt.Errorf("decode: MaxKVUsage %g: want a fraction in (0, 1], or 0 for no limit", c.MaxKVUsage)
	}
	if c.MaxWaitingTokens < 0 {
		return fmt.Errorf("decode: MaxWaitingTokens %d: want 0 (no limit) or more", c.MaxWaitingTokens)
	}
	return c.Params.Validate()
}

// Service implements DecodeService.
type Service struct {
	cfg       Config
	params    atomic.Pointer[Params]
	eng       engine.Engine
	prefill   Prefillers
	estimator estimate.Estimator
	pending   pendingPrefills
	live      estimate.Streams
	steps     estimate.StepModel
	stepFit   *estimate.StepFit // engines that report their steps (engine.StepReporter); else nil
	gapSeq    atomic.Uint64     // gaps seen by all streams, to sample one a step
	log       *slog.Logger
	metrics   *metrics
	running   atomic.Int64
}

var _ decodev1connect.DecodeServiceHandler = (*Service)(nil)

// New returns the decode service over eng. prefill may be nil for an aggregated worker.
func New(cfg Config, eng engine.Engine, prefill Prefillers, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, eng: eng, prefill: prefill, log: log, metrics: newMetrics(reg)}
	s.estimator.Chunk = eng.Info().MaxBatchedTokens
	estimate.RegisterGauges(reg, &s.estimator)
	s.pending.gauge = s.metrics.pendingTokens
	s.params.Store(&cfg.Params)
	if r, ok := eng.(engine.StepReporter); ok {
		s.stepFit = &estimate.StepFit{}
		r.ObserveSteps(s.stepFit.Observe)
	}
	return s, nil
}

// Params are the decision parameters in force.
func (s *Service) Params() Params { return *s.params.Load() }

// SetParams replaces the decision parameters for the next request, if they are valid.
func (s *Service) SetParams(p Params) error {
	if err := p.Validate(); err != nil {
		return err
	}
	s.params.Store(&p)
	return nil
}

// Generate runs one request and streams its tokens. The first message carries the
// prefill decision; the last the finish reason and usage.
func (s *Service) Generate(ctx context.Context, req *connect.Request[decodev1.GenerateRequest], out *connect.ServerStream[decodev1.GenerateResponse]) error {
	m := req.Msg
	info := s.eng.Info()
	if err := validate(m, info); err != nil {
		return err
	}
	if n := s.running.Add(1); s.cfg.MaxRunning > 0 && n > int64(s.cfg.MaxRunning) {
		s.running.Add(-1)
		return s.reject(ctx, m.GetRequestId(), &LimitError{Worker: s.cfg.WorkerID, Reason: RejectMaxRunning, Field: "MaxRunning",
			Limit: fmt.Sprint(s.cfg.MaxRunning), Detail: fmt.Sprintf("at capacity, %d requests", s.cfg.MaxRunning)})
	}
	defer s.running.Add(-1)
	st := s.eng.Stats()
	if le := s.overloaded(st); le != nil {
		return s.reject(ctx, m.GetRequestId(), le)
	}
	ereq := engine.Request{
		ID: m.GetRequestId(), Prompt: m.GetPromptTokenIds(), Sampling: handoff.Sampling(m.GetSampling()),
		MaxTokens: int(m.GetMaxTokens()), StopTokens: m.GetStopTokenIds(),
		Logprobs: m.GetSampling().GetLogprobs(), TopLogprobs: int(m.GetSampling().GetTopLogprobs()),
		PromptLogprobs: m.GetPromptLogprobs(),
	}
	start := time.Now()
	p := s.Params()
	cached := s.eng.CachedPrefix(ereq.Prompt)
	if ereq.PromptLogprobs {
		cached = 0 // the prompt is computed whole: a cached position has no logits
	}
	bs := info.Layout.BlockSize
	// The router's ranking is the one ranking: it is made with the fleet view
	// (every prefill worker's queue and cache, whoever sent them work). What this
	// worker alone knows, the prompts it has sent and not seen prefilled, goes
	// into the queue figure the policy weighs.
	candidates := s.candidates(m.GetPrefillWorkers())
	queued := 0
	if len(candidates) > 0 {
		// The larger, not the sum: the router's figure may already include some of
		// this worker's pending tokens, and counting them twice would keep prompts
		// local for a queue that is not there.
		queued = max(int(candidates[0].GetQueuedTokens()), s.pending.of(candidates[0].GetWorkerId()))
	}
	// The decision's span encloses the remote prefill's rungs; it ends when the
	// path is known (the deferred End covers the early returns).
	dctx, dspan := spans.Start(ctx, "decode.decide")
	defer dspan.End()
	pol := newPolicy(p)
	sit := s.situation(pol, p, st, len(ereq.Prompt), cached, queued)
	c := decide(p, sit)
	if ereq.PromptLogprobs && c.remote {
		// The prompt's logprobs come out of its prefill, and a prefill worker
		// hands over KV, not logits: this one is prefilled here.
		c = choice{reason: "prompt_logprobs", detail: "the request asks for the prompt's logprobs, computed where it is prefilled: locally"}
	}
	decision := &decodev1.PrefillDecision{
		Path: decodev1.PrefillPath_PREFILL_PATH_LOCAL, Reason: c.reason, Detail: c.detail, Policy: string(p.Policy),
		PromptTokens: uint32(sit.prompt), CachedTokens: uint32(cached), EffectiveTokens: uint32(sit.effective()),
	}

	ps := pathsFor(p, sit, len(candidates) > 0 && !ereq.PromptLogprobs)
	if le := shed(p, sit, c, ps); le != nil {
		le.Worker = s.cfg.WorkerID
		return s.reject(ctx, ereq.ID, le)
	}
	if c.remote && ps.remote && s.cfg.KVPrecheck {
		// Stats again: the decision took a moment, and the pool is what counts.
		now := s.eng.Stats()
		if need, room, refuse := kvPrecheck(now, len(ereq.Prompt), cached, bs); refuse {
			return s.reject(ctx, ereq.ID, s.kvBlocksError(now, need, room))
		}
	}

	var stream engine.Stream
	if c.remote {
		var err error
		stream, err = s.tryRemote(dctx, ereq, candidates, cached/bs, estimate.RemoteDeadline(sit.est, s.cfg.MinRemoteDeadline, s.cfg.MaxRemoteDeadline), decision)
		if err != nil {
			return err
		}
	}
	if stream == nil {
		var err error
		if stream, err = s.eng.Generate(ctx, ereq); err != nil {
			return errcode.Error(err)
		}
	}
	defer stream.Close()
	if _, ok := stream.(engine.PromptLogprobsStream); ereq.PromptLogprobs && !ok {
		return errcode.Error(fmt.Errorf("%w: the %s engine does not compute them", engine.ErrNoPromptLogprobs, info.Engine))
	}
	// The most tokens it may emit: max_tokens, or the context's room; unknown
	// (0) when the request set none, which the slo policy reads conservatively.
	maxTokens := 0
	if m.GetMaxTokens() > 0 {
		maxTokens = min(int(m.GetMaxTokens()), info.ContextLength-len(ereq.Prompt))
	}
	lv, gone := s.live.Add(start, maxTokens)
	defer gone()
	traceDecision(dspan, decision)
	dspan.End()
	path := decision.Path.Name()
	s.metrics.decisions.WithLabelValues(path, decision.Reason).Inc()
	s.log.InfoContext(ctx, "prefill decision", "request_id", ereq.ID, "path", path, "reason", decision.Reason,
		"detail", decision.Detail, "policy", decision.Policy, "prompt_tokens", decision.PromptTokens,
		"cached_tokens", decision.CachedTokens, "effective_tokens", decision.EffectiveTokens,
		"prefill_worker", decision.PrefillWorkerId, "failed_prefill_workers", decision.FailedPrefillWorkerIds)
	return s.pump(ctx, stream, decision, start, st.WaitingTokens, lv, out)
}

// candidates keeps the router's suggestions that discovery knows, in order, and
// falls back to every known prefill worker when the router suggested none. The
// worker itself is never one: a worker that lends prefill finds itself among the
// prefill workers in discovery, and a remote prefill on itself would only move
// its own KV through the network.
func (s *Service) candidates(suggested []*decodev1.PrefillCandidate) []*decodev1.PrefillCandidate {
	if s.prefill == nil {
		return nil
	}
	self := func(c *decodev1.PrefillCandidate) bool { return c.GetWorkerId() == s.cfg.WorkerID }
	if len(suggested) > 0 {
		if slices.ContainsFunc(suggested, self) {
			suggested = slices.DeleteFunc(slices.Clone(suggested), self)
		}
		return suggested
	}
	var out []*decodev1.PrefillCandidate
	for _, id := range s.prefill.IDs() {
		if id != s.cfg.WorkerID {
			out = append(out, &decodev1.PrefillCandidate{WorkerId: id})
		}
	}
	return out
}

// tryRemote walks the fallback ladder: the first prefill worker; on an error before
// any KV arrived, one other; then nil, meaning prefill locally. It returns an error
// when the client is gone, when EnforceDisagg forbids the fallback, or when this
// worker's own KV pool had no blocks for the import (noBlocks): the remote side
// did its part, and a local prefill would need those same blocks.
func (s *Service) tryRemote(ctx context.Context, req engine.Request, candidates []*decodev1.PrefillCandidate, skip int, deadline time.Duration,
	d *decodev1.PrefillDecision) (engine.Stream, error) {
	fail := func(reason, detail string) (engine.Stream, error) {
		s.metrics.fallbacks.WithLabelValues(reason).Inc()
		if s.Params().EnforceDisagg {
			s.metrics.decisions.WithLabelValues("error", reason).Inc()
			return nil, connect.NewError(connect.CodeUnavailable,
				fmt.Errorf("remote prefill failed (%s: %s) and enforce-disagg forbids local prefill", reason, detail))
		}
		d.Path, d.Reason = decodev1.PrefillPath_PREFILL_PATH_FALLBACK, reason
		d.Detail = fmt.Sprintf("%s; remote prefill failed: %s; prefilled locally", d.GetDetail(), detail)
		return nil, nil
	}
	if len(candidates) == 0 {
		return fail("no_prefill_worker", "no prefill worker is known")
	}
	decided, lastFailure := d.GetReason(), ""
	untried := func(c *decodev1.PrefillCandidate) bool {
		return !slices.Contains(d.FailedPrefillWorkerIds, c.GetWorkerId())
	}
	tried := 0
	for i := 0; i < len(candidates) && tried < 2; i++ {
		id := candidates[i].GetWorkerId()
		if slices.Contains(d.FailedPrefillWorkerIds, id) {
			continue
		}
		client, ok := s.prefill.Client(id)
		if !ok {
			// An id discovery does not know is never dialled: it may be stale or
			// forged. The next candidate may be known; it is not one of the tries.
			d.FailedPrefillWorkerIds = append(d.FailedPrefillWorkerIds, id)
			s.metrics.remoteFailures.WithLabelValues(reasonUnknownPrefill).Inc()
			s.log.WarnContext(ctx, "prefill worker unknown to discovery, skipped", "request_id", req.ID, "prefill_worker", id)
			if tried == 0 && !slices.ContainsFunc(candidates[i+1:], untried) {
				return fail(reasonUnknownPrefill, fmt.Sprintf("prefill workers %q are unknown to discovery", d.FailedPrefillWorkerIds))
			}
			continue
		}
		tried++
		queued := max(int(candidates[i].GetQueuedTokens()), s.pending.of(id))
		stream, ho, err := s.remotePrefill(ctx, client, id, tried, req, skip, deadline)
		if err == nil {
			d.Path, d.PrefillWorkerId = decodev1.PrefillPath_PREFILL_PATH_REMOTE, id
			if lastFailure != "" {
				// The decision stands; the failure before the retry is in the detail,
				// not in the reason the decision is counted and logged under.
				d.Reason = decided
				d.Detail = fmt.Sprintf("%s; prefill worker(s) %q failed before any KV (last: %s), retried on %s", d.GetDetail(),
					d.FailedPrefillWorkerIds, lastFailure, id)
			}
			d.PrefillTime, d.HandoffBytes = durationpb.New(ho.Prefill), uint64(ho.Bytes)
			computed := len(req.Prompt) - (ho.Skipped+ho.PrefillCached)*s.eng.Info().Layout.BlockSize
			// The prefill worker reports its own prefill time; it cannot exceed what
			// this worker measured, and one bogus figure must not skew the policy.
			s.estimator.ObserveRemote(computed, queued, min(ho.Prefill, ho.Total), min(ho.Queue, ho.Total), ho.Bytes, ho.Transfer, ho.Total)
			s.metrics.handoffBytes.Observe(float64(ho.Bytes))
			s.metrics.handoffSeconds.Observe(ho.Transfer.Seconds())
			s.metrics.queueWait.Observe(ho.Queue.Seconds())
			return stream, nil
		}
		if ctx.Err() != nil {
			// The client went away (or its deadline passed) during the prefill. What
			// the stream or the import then said ("import: context canceled", a
			// Canceled status, an aborted import) is that, not the prefill worker
			// failing, and there is no one to fall back for.
			return nil, s.clientGone(ctx, req.ID, id, d, err)
		}
		var re *handoff.Error
		if !errors.As(err, &re) {
			return nil, errcode.Error(err)
		}
		d.FailedPrefillWorkerIds = append(d.FailedPrefillWorkerIds, id)
		s.prefill.Failed(id)
		s.metrics.remoteFailures.WithLabelValues(re.Reason).Inc()
		s.log.WarnContext(ctx, "remote prefill failed", "request_id", req.ID, "prefill_worker", id, "reason", re.Reason, "error", re.Err)
		if re.Reason == handoff.ReasonImportNoBlocks {
			return nil, s.noBlocks(ctx, req.ID, id, d, re)
		}
		if !re.BeforeKV {
			return fail(re.Reason, re.Error())
		}
		if tried == 1 && !slices.ContainsFunc(candidates[i+1:], untried) {
			// The router offered no other that has not failed or is unknown;
			// discovery may know one to retry on.
			for _, other := range s.prefill.IDs() {
				if !slices.Contains(d.FailedPrefillWorkerIds, other) {
					candidates = append(candidates, &decodev1.PrefillCandidate{WorkerId: other})
					break
				}
			}
		}
		if ctx.Err() != nil {
			return nil, s.clientGone(ctx, req.ID, id, d, err)
		}
		lastFailure = re.Reason
	}
	if lastFailure == "" {
		// Every candidate was a repeat of one that had already failed.
		lastFailure = "no_prefill_worker"
	}
	return fail(lastFailure, "no prefill worker succeeded before any KV arrived")
}

// reasonUnknownPrefill: a candidate prefill worker discovery does not know.
const reasonUnknownPrefill = "unknown_prefill_worker"

// clientGone ends a request whose client went away during a remote prefill. It is
// logged at info and counted as none of a remote prefill failure, a fallback or a
// decision (no path was taken); the call itself is counted as Canceled (or
// DeadlineExceeded when the client's own deadline passed), which the caller sees.
func (s *Service) clientGone(ctx context.Context, reqID, prefillWorker string, d *decodev1.PrefillDecision, err error) error {
	s.log.InfoContext(ctx, "client went away during the remote prefill", "request_id", reqID,
		"prefill_worker", prefillWorker, "reason", d.GetReason(), "error", err)
	return connect.NewError(errcode.Of(ctx.Err()), fmt.Errorf("remote prefill on %s: %w", prefillWorker, err))
}

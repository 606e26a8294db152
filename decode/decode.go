// Package decode serves Generate on a decode (or aggregated) worker: it decides
// whether to prefill the prompt here or on a prefill worker, imports the KV when
// remote, falls back to local prefill when remote fails, and streams the tokens.
package decode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/engine"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/wire"
)

// Config is the decode worker's identity and decision policy.
type Config struct {
	WorkerID string
	Mode     workerv1.WorkerMode
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
	return nil
}

// Service implements DecodeService.
type Service struct {
	cfg     Config
	eng     engine.Engine
	log     *slog.Logger
	metrics *metrics
}

var _ decodev1connect.DecodeServiceHandler = (*Service)(nil)

// New returns the decode service over eng.
func New(cfg Config, eng engine.Engine, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, eng: eng, log: log, metrics: newMetrics(reg)}, nil
}

// Generate runs one request and streams its tokens. The first message carries the
// prefill decision; the last the finish reason and usage.
func (s *Service) Generate(ctx context.Context, req *connect.Request[decodev1.GenerateRequest], out *connect.ServerStream[decodev1.GenerateResponse]) error {
	m := req.Msg
	if err := validate(m, s.eng.Info()); err != nil {
		return err
	}
	ereq := engine.Request{
		ID: m.GetRequestId(), Prompt: m.GetPromptTokenIds(), Sampling: wire.Sampling(m.GetSampling()),
		MaxTokens: int(m.GetMaxTokens()), StopTokens: m.GetStopTokenIds(),
	}
	start := time.Now()
	cached := s.eng.CachedPrefix(ereq.Prompt)
	decision := &decodev1.PrefillDecision{
		Path: decodev1.PrefillPath_PREFILL_PATH_LOCAL, Reason: "always_local", Policy: "always-local",
		Detail:       "this worker prefills every prompt locally",
		PromptTokens: uint32(len(ereq.Prompt)), CachedTokens: uint32(cached), EffectiveTokens: uint32(len(ereq.Prompt) - cached),
	}
	stream, err := s.eng.Generate(ctx, ereq)
	if err != nil {
		return wire.Error(err)
	}
	defer stream.Close()
	s.metrics.decisions.WithLabelValues(pathLabel(decision.Path), decision.Reason).Inc()
	s.log.InfoContext(ctx, "prefill decision", "request_id", ereq.ID, "path", pathLabel(decision.Path), "reason", decision.Reason,
		"prompt_tokens", decision.PromptTokens, "cached_tokens", decision.CachedTokens, "effective_tokens", decision.EffectiveTokens)
	return s.pump(ctx, stream, decision, start, out)
}

// pump relays tokens from the engine to the client. Tokens are sent one message
// each so that the inter-token latency the client sees is the engine's.
func (s *Service) pump(ctx context.Context, stream engine.Stream, decision *decodev1.PrefillDecision, start time.Time, out *connect.ServerStream[decodev1.GenerateResponse]) error {
	first := true
	last := start
	for {
		tok, err := stream.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return wire.Error(err)
		}
		now := time.Now()
		msg := &decodev1.GenerateResponse{TokenIds: []uint32{tok}}
		if first {
			s.metrics.ttft.WithLabelValues(pathLabel(decision.Path)).Observe(now.Sub(start).Seconds())
			msg.Prefill, msg.WorkerId, msg.WorkerMode = decision, s.cfg.WorkerID, s.cfg.Mode
			first = false
		} else {
			s.metrics.itl.Observe(now.Sub(last).Seconds())
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
	}
	s.metrics.completed.WithLabelValues(stream.Finish().String()).Inc()
	return out.Send(final)
}

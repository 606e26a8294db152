// Package prefill serves remote prefill: it admits a prompt, runs it on the engine
// and hands its KV to the decode worker that asked (package handoff).
package prefill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/internal/errcode"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
)

// Config bounds what one prefill may hold.
type Config struct {
	WorkerID string
	// ChunkBytes is the target size of one chunk; whole blocks, at least one.
	ChunkBytes int
	// MaxLease caps how long exported KV may wait for a stalled receiver.
	MaxLease time.Duration
	// MaxPromptTokens rejects longer prompts up front.
	MaxPromptTokens int
	// MaxQueuedTokens bounds the prompt tokens accepted and not yet prefilled
	// (0: unbounded). Past it a request is refused at once with ResourceExhausted,
	// so the decode worker prefills locally instead of waiting in a long queue.
	MaxQueuedTokens int
}

// DefaultConfig is the prefill service's config unless the worker says otherwise:
// 1 MiB chunks (smaller ones cost more per byte; 4 MiB and more pass grpc-go's
// default message limit) and a 30 s lease. The
// caller sets WorkerID and the limits.
func DefaultConfig() Config {
	return Config{ChunkBytes: 1 << 20, MaxLease: 30 * time.Second}
}

// Validate checks the config.
func (c Config) Validate() error {
	if c.ChunkBytes <= 0 || c.MaxLease <= 0 {
		return errors.New("prefill: ChunkBytes and MaxLease must be positive")
	}
	return nil
}

// Service implements PrefillService.
type Service struct {
	cfg     Config
	eng     engine.Engine
	log     *slog.Logger
	metrics *metrics
	queued  atomic.Int64 // prompt tokens accepted and not yet prefilled
	emptied engine.Broadcast
	// draining: `tandem drain` asked for nothing new. Prefills already running
	// finish; a new one is refused before any work, so the decode worker retries
	// elsewhere or prefills locally, even when its view of the fleet (or the
	// router's) has not caught up with the drain yet.
	draining atomic.Bool
}

var _ prefillv1connect.PrefillServiceHandler = (*Service)(nil)

// New returns the prefill service over eng.
func New(cfg Config, eng engine.Engine, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, eng: eng, log: log, metrics: newMetrics(reg)}, nil
}

// QueuedTokens are the prompt tokens accepted and not yet prefilled: a worker's
// load reports them (Load.lent_waiting_tokens), and a lender's decides whether
// the router sends it decodes (--lenders-prefill-first).
func (s *Service) QueuedTokens() uint64 { return uint64(max(0, s.queued.Load())) }

// QueueEmptied is closed when the queue next falls to nothing: the engine's own
// notices come before a prefill's tokens leave this queue, so without it a
// lender's report would say it is lending until the next heartbeat.
func (s *Service) QueueEmptied() <-chan struct{} { return s.emptied.Wait() }

func (s *Service) dequeue(tokens int64) {
	if s.queued.Add(-tokens) == 0 {
		s.emptied.Fire()
	}
}

// SetDraining makes the service refuse new prefills (true) or take them again.
func (s *Service) SetDraining(draining bool) { s.draining.Store(draining) }

// Prefill runs the prompt and streams its KV. The exported blocks are released as
// soon as the last chunk is sent, when the receiver goes away, or when a send stalls
// past the lease; HTTP/2 flow control keeps only a window's worth of chunks in flight.
func (s *Service) Prefill(ctx context.Context, req *connect.Request[prefillv1.PrefillRequest], stream *connect.ServerStream[prefillv1.PrefillResponse]) error {
	return s.serve(ctx, req.Msg, stream.Send, PortMain)
}

// Ports a prefill is served on, as metrics and logs name them.
const (
	PortMain = "main" // the Connect handler on the service's one port
	PortKV   = "kv"   // the KV transfer port (GRPC)
)

// serve is Prefill for any transport: sendMsg delivers one message to the
// receiver, blocking while flow control holds it back.
func (s *Service) serve(ctx context.Context, m *prefillv1.PrefillRequest, sendMsg func(*prefillv1.PrefillResponse) error, port string) error {
	if len(m.GetPromptTokenIds()) == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("prompt_token_ids: empty"))
	}
	if s.cfg.MaxPromptTokens > 0 && len(m.GetPromptTokenIds()) > s.cfg.MaxPromptTokens {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("prompt_token_ids: %d tokens, more than the %d this worker accepts",
			len(m.GetPromptTokenIds()), s.cfg.MaxPromptTokens))
	}
	if s.draining.Load() {
		s.metrics.requests.WithLabelValues("draining").Inc()
		return connect.NewError(connect.CodeUnavailable, errors.New("prefill worker is draining: it takes no new prefills"))
	}
	lease := s.cfg.MaxLease
	if l := m.GetLease().AsDuration(); l > 0 && l < lease {
		lease = l
	}
	// A prompt larger than the whole limit is still taken when nothing else is
	// queued: refusing it everywhere would make it impossible to serve.
	tokens := int64(len(m.GetPromptTokenIds()))
	if q := s.queued.Add(tokens); s.cfg.MaxQueuedTokens > 0 && q > int64(s.cfg.MaxQueuedTokens) && q != tokens {
		s.dequeue(tokens)
		s.metrics.requests.WithLabelValues("queue_full").Inc()
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("prefill queue full: %d tokens queued, limit %d", q-tokens, s.cfg.MaxQueuedTokens))
	}
	// failed counts a request that ended early: "cancelled" when the receiver went
	// away (a client that left is not a failure of this worker), "deadline_exceeded"
	// when the decode worker's deadline for it ran out, else outcome.
	failed := func(outcome string) {
		switch {
		case ctx.Err() == nil:
		case errors.Is(ctx.Err(), context.DeadlineExceeded) || pastDeadline(ctx):
			outcome = "deadline_exceeded"
		default:
			outcome = "cancelled"
		}
		s.metrics.requests.WithLabelValues(outcome).Inc()
	}
	if m.GetByReference() {
		defer s.dequeue(tokens)
		return s.serveRef(ctx, m, sendMsg, port, failed)
	}
	start := time.Now()
	exp, err := s.eng.Prefill(ctx, handoff.EngineRequest(m))
	s.dequeue(tokens)
	if err != nil {
		failed("prefill_error")
		return errcode.Error(err)
	}
	defer exp.Release()
	s.metrics.queue.Observe(exp.QueueTime().Seconds())
	s.metrics.compute.Observe(exp.PrefillTime().Seconds())

	sender := handoff.Sender{ChunkBytes: s.cfg.ChunkBytes, Lease: lease, LeaseExpired: func() {
		s.metrics.requests.WithLabelValues(handoff.OutcomeLeaseExpired).Inc()
		s.log.WarnContext(ctx, "lease expired; KV released", "request_id", m.GetRequestId(), "lease", lease)
	}}
	sent, err := sender.Send(exp, handoff.Meta{
		RequestID: m.GetRequestId(), WorkerID: s.cfg.WorkerID, PromptTokens: len(m.GetPromptTokenIds()),
		Layout: s.eng.Info().Layout, SkipBlocks: int(m.GetSkipBlocks()),
	}, func(r *prefillv1.PrefillResponse) error {
		if err := sendMsg(r); err != nil {
			return err
		}
		// Per chunk, so that a long handoff shows on a dashboard while it runs.
		if c := r.GetChunk(); c != nil {
			s.metrics.bytes.WithLabelValues(port).Add(float64(len(c.GetData())))
		}
		return nil
	})
	if se := (*handoff.SendError)(nil); errors.As(err, &se) {
		if se.Outcome != handoff.OutcomeLeaseExpired { // counted when it expired
			failed(se.Outcome)
		}
		return se.Err
	}
	s.metrics.requests.WithLabelValues("ok").Inc()
	s.log.InfoContext(ctx, "prefill sent", "request_id", m.GetRequestId(), "prompt_tokens", len(m.GetPromptTokenIds()),
		"blocks", sent.Blocks, "skipped", sent.Skipped, "bytes", sent.Bytes, "port", port, "prefill", exp.PrefillTime(),
		"transfer", sent.Transfer, "total", time.Since(start))
	return nil
}

// pastDeadline reports whether ctx's deadline has (nearly) come. When a caller's
// deadline runs out, its cancel and this side's own deadline race: the caller's
// reset often arrives first, and ctx then says Canceled.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < 50*time.Millisecond
}

// serveRef is a handoff by reference: the engine runs its own prefill leg and
// returns transfer parameters, which the header carries to the decode worker's
// engine; the trailer follows once the engine's side is over.
func (s *Service) serveRef(ctx context.Context, m *prefillv1.PrefillRequest, sendMsg func(*prefillv1.PrefillResponse) error, port string,
	failed func(outcome string)) error {
	re, ok := s.eng.(engine.RefExporter)
	if !ok {
		failed("prefill_error")
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("this prefill worker's engine (%s) hands KV over in chunks, not by reference",
			s.eng.Info().Engine))
	}
	start := time.Now()
	exp, err := re.ExportRef(ctx, handoff.EngineRequest(m))
	if err != nil {
		failed("prefill_error")
		s.log.WarnContext(ctx, "prefill by reference failed", "request_id", m.GetRequestId(), "error", err)
		return errcode.Error(err)
	}
	defer exp.Release()
	err = handoff.SendRef(ctx, exp, handoff.Meta{
		RequestID: m.GetRequestId(), WorkerID: s.cfg.WorkerID, PromptTokens: len(m.GetPromptTokenIds()), Layout: s.eng.Info().Layout,
	}, sendMsg)
	if se := (*handoff.SendError)(nil); errors.As(err, &se) {
		failed(se.Outcome)
		s.log.WarnContext(ctx, "prefill by reference failed", "request_id", m.GetRequestId(), "outcome", se.Outcome, "error", se.Err)
		return se.Err
	}
	s.metrics.queue.Observe(exp.QueueTime().Seconds())
	s.metrics.compute.Observe(exp.PrefillTime().Seconds())
	s.metrics.requests.WithLabelValues("ok").Inc()
	s.log.InfoContext(ctx, "prefill sent by reference", "request_id", m.GetRequestId(), "prompt_tokens", len(m.GetPromptTokenIds()),
		"port", port, "prefill", exp.PrefillTime(), "total", time.Since(start))
	return nil
}

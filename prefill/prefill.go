// Package prefill serves remote prefill: it runs a prompt on the engine and streams
// the KV cache out as a header, CRC-checked chunks of whole blocks, and a trailer.
package prefill

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tandem-serve/tandem/engine"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
	"github.com/tandem-serve/tandem/wire"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

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
}

var _ prefillv1connect.PrefillServiceHandler = (*Service)(nil)

// New returns the prefill service over eng.
func New(cfg Config, eng engine.Engine, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, eng: eng, log: log, metrics: newMetrics(reg)}, nil
}

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
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("prompt_token_ids: %d tokens, more than the %d this worker accepts", len(m.GetPromptTokenIds()), s.cfg.MaxPromptTokens))
	}
	lease := s.cfg.MaxLease
	if l := m.GetLease().AsDuration(); l > 0 && l < lease {
		lease = l
	}
	// A prompt larger than the whole limit is still taken when nothing else is
	// queued: refusing it everywhere would make it impossible to serve.
	tokens := int64(len(m.GetPromptTokenIds()))
	if q := s.queued.Add(tokens); s.cfg.MaxQueuedTokens > 0 && q > int64(s.cfg.MaxQueuedTokens) && q != tokens {
		s.queued.Add(-tokens)
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
	start := time.Now()
	exp, err := s.eng.Prefill(ctx, engine.Request{
		ID: m.GetRequestId(), Prompt: m.GetPromptTokenIds(), Sampling: wire.Sampling(m.GetSampling()), MaxTokens: 1,
	})
	s.queued.Add(-tokens)
	if err != nil {
		failed("prefill_error")
		return wire.Error(err)
	}
	defer exp.Release()
	s.metrics.queue.Observe(exp.QueueTime().Seconds())
	s.metrics.compute.Observe(exp.PrefillTime().Seconds())

	layout := s.eng.Info().Layout
	n := exp.NumBlocks()
	skip := int(m.GetSkipBlocks())
	if skip >= n {
		// The receiver holds every block but must still import at least the last one,
		// whose tail it is missing.
		skip = n - 1
	}
	// A stalled receiver must not pin KV forever: when the lease runs out the blocks
	// are released at once. The send itself cannot be abandoned (the handler may not
	// return while a Send is in progress), so it is waited for: it ends when the
	// receiver reads or its connection goes.
	leaseTimer := time.NewTimer(lease)
	defer leaseTimer.Stop()
	expired := false
	send := func(r *prefillv1.PrefillResponse) error {
		if expired {
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("receiver stalled past the %s lease", lease))
		}
		errc := make(chan error, 1)
		go func() { errc <- sendMsg(r) }()
		select {
		case err := <-errc:
			return err
		case <-leaseTimer.C:
			expired = true
			exp.Release()
			s.metrics.requests.WithLabelValues("lease_expired").Inc()
			s.log.WarnContext(ctx, "lease expired; KV released", "request_id", m.GetRequestId(), "lease", lease)
			<-errc
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("receiver stalled past the %s lease", lease))
		}
	}
	err = send(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Header{Header: &prefillv1.Header{
		RequestId: m.GetRequestId(), FirstToken: exp.FirstToken(), PromptTokens: uint32(len(m.GetPromptTokenIds())),
		BlockSize: uint32(layout.BlockSize), Layout: wire.LayoutProto(layout), NumBlocks: uint32(n),
		SkippedBlocks: uint32(skip), PrefillCachedBlocks: uint32(exp.CachedBlocks()), WorkerId: s.cfg.WorkerID,
	}}})
	if err != nil {
		if !expired {
			failed("send_error")
		}
		return err
	}
	per := max(1, s.cfg.ChunkBytes/max(1, layout.BlockBytes))
	sendStart := time.Now()
	var sentBlocks, sentBytes int
	buf := make([]byte, 0, per*layout.BlockBytes)
	for first := skip; first < n; first += per {
		count := min(per, n-first)
		buf = buf[:0]
		for i := first; i < first+count; i++ {
			if buf, err = exp.AppendBlock(buf, i); err != nil {
				failed("read_error")
				return connect.NewError(connect.CodeInternal, fmt.Errorf("read block %d: %w", i, err))
			}
		}
		chunk := &prefillv1.Chunk{FirstBlock: uint32(first), BlockCount: uint32(count), Data: buf, Crc32C: crc32.Checksum(buf, castagnoli)}
		if err := send(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Chunk{Chunk: chunk}}); err != nil {
			if !expired { // an expired lease was counted as such
				failed("send_error")
			}
			return err
		}
		sentBlocks += count
		sentBytes += len(buf)
		// Per chunk, so that a long handoff shows on a dashboard while it runs.
		s.metrics.bytes.WithLabelValues(port).Add(float64(len(buf)))
	}
	transfer := time.Since(sendStart)
	// The decode worker needs the trailer to use the KV: only once it is sent is
	// the prefill done.
	if err := send(&prefillv1.PrefillResponse{Msg: &prefillv1.PrefillResponse_Trailer{Trailer: &prefillv1.Trailer{
		BlocksSent: uint32(sentBlocks), BytesSent: uint64(sentBytes), PrefillTime: durationpb.New(exp.PrefillTime()),
		QueueTime: durationpb.New(exp.QueueTime()), TransferTime: durationpb.New(transfer),
	}}}); err != nil {
		if !expired {
			failed("send_error")
		}
		return err
	}
	s.metrics.requests.WithLabelValues("ok").Inc()
	s.log.InfoContext(ctx, "prefill sent", "request_id", m.GetRequestId(), "prompt_tokens", len(m.GetPromptTokenIds()),
		"blocks", sentBlocks, "skipped", skip, "bytes", sentBytes, "port", port, "prefill", exp.PrefillTime(), "transfer", transfer, "total", time.Since(start))
	return nil
}

// pastDeadline reports whether ctx's deadline has (nearly) come. When a caller's
// deadline runs out, its cancel and this side's own deadline race: the caller's
// reset often arrives first, and ctx then says Canceled.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < 50*time.Millisecond
}

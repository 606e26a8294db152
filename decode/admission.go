package decode

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/tandem-serve/tandem/engine"
	"github.com/tandem-serve/tandem/handoff"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// Reasons a decode worker refuses a request at admission, the label of
// tandem_decode_rejected_total.
const (
	RejectMaxRunning    = "max_running"    // MaxRunning requests already here
	RejectKVUsage       = "kv_usage"       // the engine's KV pool fuller than MaxKVUsage
	RejectWaitingTokens = "waiting_tokens" // more than MaxWaitingTokens prompt tokens waiting
	// RejectKVBlocks: a remote prefill's KV found no free blocks here within the
	// import's wait (noBlocks), refused after the prefill; or, with KVPrecheck,
	// the pool could not hold it when the decision was made (kvPrecheck),
	// refused before the prefill.
	RejectKVBlocks = "kv_blocks"
	// RejectTTFTUnmeetable: the projected TTFT on every path the request could
	// take is past ShedTTFTFactor times the TTFT objective (shed).
	RejectTTFTUnmeetable = "ttft_unmeetable"
)

// LimitError is a refusal on one of Config's admission limits. It names the
// limit by its Config field (MaxKVUsage): the decode package knows no flags, and
// services/ names the flag that sets the field in the status the client sees
// (Named).
type LimitError struct {
	Worker string
	Reason string // one of the Reject constants
	Field  string // the Config field whose limit was crossed, e.g. "MaxKVUsage"
	Limit  string // its value, as configured
	Detail string // what was seen against the limit
}

func (e *LimitError) Error() string { return e.Named(e.Field) }

// Named is the refusal with the limit called name (a flag, say) instead of its
// Config field.
func (e *LimitError) Named(name string) string {
	return fmt.Sprintf("decode worker %s refuses the request: %s (%s %s)", e.Worker, e.Detail, name, e.Limit)
}

// overloaded says why a new request should be refused on the engine's load, or
// nil to take it. The request count alone lets a worker take requests its engine
// can only queue: past the pool's capacity a real engine (and the sim) keeps them
// waiting, every one of them then missing its TTFT, and past the device's prefill
// rate the queue grows without bound. Refused at once instead, a request goes to
// another worker, or back to the client as a 429 to retry, while this worker
// serves what it holds. The limits are on what the worker already holds, not on
// the request's own size: a long prompt arriving at an idle worker is taken.
func (s *Service) overloaded(st engine.Stats) *LimitError {
	if s.cfg.MaxKVUsage > 0 && st.TotalBlocks > 0 {
		if u := float64(st.ActiveBlocks) / float64(st.TotalBlocks); u > s.cfg.MaxKVUsage {
			return &LimitError{Worker: s.cfg.WorkerID, Reason: RejectKVUsage, Field: "MaxKVUsage", Limit: fmt.Sprint(s.cfg.MaxKVUsage),
				Detail: fmt.Sprintf("KV cache %.1f%% in use (%d of %d blocks), above the limit of %.1f%%",
					100*u, st.ActiveBlocks, st.TotalBlocks, 100*s.cfg.MaxKVUsage)}
		}
	}
	if s.cfg.MaxWaitingTokens > 0 && st.WaitingTokens > s.cfg.MaxWaitingTokens {
		return &LimitError{Worker: s.cfg.WorkerID, Reason: RejectWaitingTokens, Field: "MaxWaitingTokens", Limit: fmt.Sprint(s.cfg.MaxWaitingTokens),
			Detail: fmt.Sprintf("%d prompt tokens waiting for prefill (%d requests), above the limit of %d",
				st.WaitingTokens, st.Waiting, s.cfg.MaxWaitingTokens)}
	}
	return nil
}

// reject refuses a request before it starts: counted by reason, logged with its
// id, and answered ResourceExhausted, which the frontend takes as "try another
// worker", then as a 429 for the client.
func (s *Service) reject(ctx context.Context, reqID string, le *LimitError) error {
	s.metrics.rejected.WithLabelValues(le.Reason).Inc()
	s.log.InfoContext(ctx, "request refused at admission", "request_id", reqID, "reason", le.Reason, "detail", le.Error())
	return refusal(le.Reason, le)
}

// ErrorDomain is the domain of the google.rpc.ErrorInfo a refusal carries.
const ErrorDomain = "tandem.decode.v1"

// refusal is a ResourceExhausted refusal that carries its reason (one of the
// Reject constants, upper-cased as ErrorInfo reasons are) as a
// google.rpc.ErrorInfo: a frontend tells a moment's lack of room, worth
// offering again, from a shed (TTFT_UNMEETABLE), which is not, without
// reading the message.
func refusal(reason string, err error) *connect.Error {
	ce := connect.NewError(connect.CodeResourceExhausted, err)
	if d, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: strings.ToUpper(reason), Domain: ErrorDomain}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// noBlocks ends a request whose remote prefill succeeded but whose KV this
// worker's engine had no blocks for, even after waiting (engine.ErrNoBlocks, which
// the sim and native engines both return once the import's BlockWait, a share of
// the remote deadline from the estimate, runs out). A local prefill is no way out:
// it needs the same blocks on the same pool, and would only queue behind the
// sequences that filled it, stalling them and itself (on the Mooncake trace such
// fallbacks were most of always-remote@3's requests). Refused ResourceExhausted
// instead, the request goes to a decode worker with room, or back to the client as
// a 429. Counted as a rejection (kv_blocks) and as an error decision, logged with
// the request id, and the status message carries the decision's reason.
func (s *Service) noBlocks(ctx context.Context, reqID, prefillWorker string, d *decodev1.PrefillDecision, re *handoff.Error) error {
	d.Reason = re.Reason
	s.metrics.rejected.WithLabelValues(RejectKVBlocks).Inc()
	s.metrics.decisions.WithLabelValues("error", re.Reason).Inc()
	s.log.WarnContext(ctx, "no KV blocks for the remote prefill's KV; refused rather than prefilled locally on the same full pool",
		"request_id", reqID, "prefill_worker", prefillWorker, "reason", re.Reason, "error", re.Err)
	return refusal(RejectKVBlocks, fmt.Errorf(
		"decode worker %s refuses the request: %s (%v) after the remote prefill on %s; a local prefill would need the same blocks",
		s.cfg.WorkerID, re.Reason, re.Err, prefillWorker))
}

package decode

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandem-serve/tandem/handoff"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
)

// traceDecision puts the prefill decision on its span: the path taken, why, and
// the tokens it weighed, as the "prefill decision" log line says them.
func traceDecision(span trace.Span, d *decodev1.PrefillDecision) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		attribute.String("tandem.decode.path", d.GetPath().Name()),
		attribute.String("tandem.decode.reason", d.GetReason()),
		attribute.String("tandem.decode.detail", d.GetDetail()),
		attribute.String("tandem.decode.policy", d.GetPolicy()),
		attribute.Int("tandem.decode.prompt_tokens", int(d.GetPromptTokens())),
		attribute.Int("tandem.decode.cached_tokens", int(d.GetCachedTokens())),
		attribute.Int("tandem.decode.effective_tokens", int(d.GetEffectiveTokens())),
		attribute.String("tandem.decode.prefill_worker", d.GetPrefillWorkerId()),
		attribute.StringSlice("tandem.decode.failed_prefill_workers", d.GetFailedPrefillWorkerIds()),
	)
}

// traceRung puts one rung of the fallback ladder on its span: the KV received, or
// the failure and whether it came before any KV (which is what allows a retry).
func traceRung(span trace.Span, workerID string, rung, skip int, ho *handoff.Result, err error) {
	span.SetAttributes(attribute.String("tandem.prefill.worker", workerID), attribute.Int("tandem.prefill.rung", rung),
		attribute.Int("tandem.kv.skipped_blocks", skip))
	if err != nil {
		attrs := []attribute.KeyValue{}
		var re *handoff.Error
		if errors.As(err, &re) {
			attrs = append(attrs, attribute.String("tandem.prefill.failure", re.Reason), attribute.Bool("tandem.prefill.before_kv", re.BeforeKV))
		}
		span.SetAttributes(attrs...)
		span.SetStatus(codes.Error, err.Error())
		return
	}
	if ho == nil {
		return
	}
	span.SetAttributes(
		attribute.Int("tandem.kv.bytes", ho.Bytes),
		attribute.Int("tandem.kv.blocks", ho.Blocks),
		attribute.Int("tandem.kv.prefill_cached_blocks", ho.PrefillCached),
		attribute.Float64("tandem.kv.transfer_seconds", ho.Transfer.Seconds()),
		attribute.Float64("tandem.prefill.seconds", ho.Prefill.Seconds()),
		attribute.Float64("tandem.prefill.queue_seconds", ho.Queue.Seconds()),
	)
}

// traceFirstToken marks the first token on the call's span, with the time to it.
func traceFirstToken(ctx context.Context, path string, ttft time.Duration) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("first_token", trace.WithAttributes(attribute.String("tandem.decode.path", path),
			attribute.Float64("tandem.ttft_seconds", ttft.Seconds())))
	}
}

// traceEnd marks the stream's end on the call's span.
func traceEnd(ctx context.Context, finish string, completion int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("stream_end", trace.WithAttributes(attribute.String("tandem.finish_reason", finish),
			attribute.Int("tandem.completion_tokens", completion)))
	}
}

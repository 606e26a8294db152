package frontend

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandem-serve/tandem/internal/spans"
)

// prepareTraced is prepare (validation, chat template, tokenization) as a span of
// the request's trace, with the prompt's length in tokens.
func (f *Frontend) prepareTraced(ctx context.Context, g *genRequest) (*prepared, error) {
	ctx, span := spans.Start(ctx, "frontend.prepare")
	defer span.End()
	p, err := f.prepare(ctx, g)
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("tandem.frontend.chat_template", g.isChat))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attribute.Int("tandem.frontend.prompt_tokens", p.promptLen), attribute.Int("tandem.frontend.max_tokens", p.maxTokens))
		}
	}
	return p, err
}

// endTemplate ends the chat template's span, saying how the prompt was cut
// (split, whole or refused).
func endTemplate(span trace.Span, how string, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("tandem.frontend.prompt_cut", how))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// endTokenize ends the tokenizer's span with the prompt's length in tokens.
func endTokenize(span trace.Span, ids []uint32) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("tandem.frontend.prompt_tokens", len(ids)))
	}
	span.End()
}

// streamEnded puts the stream's end on the request's span as an event: why it
// finished, how many tokens it made and how soon the first came, which the
// decode worker's spans alone cannot say as the client saw it.
func streamEnded(span trace.Span, o Outcome) {
	if span == nil || !span.IsRecording() {
		return
	}
	finish := o.Finish
	if finish == "" {
		finish = "none"
	}
	span.AddEvent("tandem.frontend.stream_end", trace.WithAttributes(attribute.String("tandem.frontend.finish_reason", finish),
		attribute.Int("tandem.frontend.completion_tokens", o.CompletionTokens),
		attribute.Float64("tandem.frontend.ttft_ms", float64(o.TTFT.Microseconds())/1000)))
}

// withTrace adds the request's trace id to its logger, whose lines are logged
// without a context, so that every line about a request leads to its trace.
func withTrace(ctx context.Context, log *slog.Logger) *slog.Logger {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return log.With("trace_id", sc.TraceID().String())
	}
	return log
}

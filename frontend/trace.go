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
	_, span := spans.Start(ctx, "frontend.prepare")
	defer span.End()
	p, err := f.prepare(g)
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

// withTrace adds the request's trace id to its logger, whose lines are logged
// without a context, so that every line about a request leads to its trace.
func withTrace(ctx context.Context, log *slog.Logger) *slog.Logger {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return log.With("trace_id", sc.TraceID().String())
	}
	return log
}

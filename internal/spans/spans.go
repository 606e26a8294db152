// Package spans starts the spans of tandem's own steps (the router's decision, the
// decode worker's, a remote prefill) with the OpenTelemetry API alone: a span is
// made by the tracer provider of the span already in the context, which the
// services' interceptors put there when tracing is on. Domain packages thus know
// no SDK, exporter or global; with tracing off there is no span in the context and
// a step costs one context lookup.
package spans

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// scope names tandem's own spans' instrumentation scope.
const scope = "github.com/tandem-serve/tandem"

// Start starts a span named name under the context's span. Without a recording
// span in ctx it starts nothing, allocates nothing, and returns ctx and that
// non-recording span, whose End and setters do nothing: callers guard attribute
// building with IsRecording.
func Start(ctx context.Context, name string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(scope).Start(ctx, name)
}

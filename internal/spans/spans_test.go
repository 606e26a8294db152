package spans

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// With tracing off (no span in the context) a step starts nothing and allocates nothing.
func TestOffCostsNothing(t *testing.T) {
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, s := Start(ctx, "step")
		if s.IsRecording() {
			t.Fatal("a span recorded with tracing off")
		}
		s.End()
		_ = c
	})
	if allocs != 0 {
		t.Errorf("Start with tracing off allocates %v times, want 0", allocs)
	}
}

// With tracing on, a step's span is the child of the context's, made by its provider.
func TestChildOfContextSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "call")
	_, s := Start(ctx, "step")
	s.End()
	parent.End()
	ended := rec.Ended()
	if len(ended) != 2 || ended[0].Name() != "step" || ended[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("spans %v, want step under call", ended)
	}
}

package telemetry

import (
	"bytes"
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A line logged with a traced context carries its trace and span ids; one logged
// without does not.
func TestLoggerCarriesTraceID(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "info", "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "call")
	defer span.End()
	log.With("request_id", "r1").InfoContext(ctx, "traced")
	log.Info("untraced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	id, sid := span.SpanContext().TraceID().String(), span.SpanContext().SpanID().String()
	if !strings.Contains(lines[0], `"trace_id":"`+id+`"`) || !strings.Contains(lines[0], `"span_id":"`+sid+`"`) {
		t.Errorf("traced line %s, want trace_id %s and span_id %s", lines[0], id, sid)
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("untraced line %s has a trace id", lines[1])
	}
}

// FromContext makes a span with the provider of the context's span (the calling
// service's), and with the default one when there is none.
func TestFromContextUsesCallersProvider(t *testing.T) {
	callerRec, defRec := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	caller := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(callerRec))
	def := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(defRec))
	tr := FromContext(def).Tracer("client")
	ctx, parent := caller.Tracer("t").Start(context.Background(), "call")
	_, s := tr.Start(ctx, "rpc")
	s.End()
	parent.End()
	_, s = tr.Start(context.Background(), "background")
	s.End()
	if n := len(callerRec.Ended()); n != 2 {
		t.Errorf("the caller's provider ended %d spans, want call and rpc", n)
	}
	if e := defRec.Ended(); len(e) != 1 || e[0].Name() != "background" {
		t.Errorf("the default provider ended %v, want background alone", e)
	}
}

// Tracing is off unless an endpoint is given, by flag or by OpenTelemetry's variables.
func TestTracingOffByDefault(t *testing.T) {
	var tr Tracing
	tr.TracingFromEnv(func(string) string { return "" })
	if tr.Enabled() {
		t.Fatal("tracing on with no endpoint")
	}
	if tc, err := StartTracing(context.Background(), tr); tc != nil || err != nil || tc.Provider("x") != nil {
		t.Fatalf("StartTracing off = %v, %v", tc, err)
	}
	tr.TracingFromEnv(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317"}[k]
	})
	if !tr.Enabled() {
		t.Error("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT did not turn tracing on")
	}
}

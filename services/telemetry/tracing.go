package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TraceHeader is the response header that carries a request's trace id, so that a
// user's report (which quotes the response's headers) leads to its trace. It is
// simpler to quote than W3C's traceresponse, which also carries a span id and flags.
const TraceHeader = "x-trace-id"

// Tracing says where a process sends its traces. Tracing is off unless an endpoint
// is given: then no span is made and no interceptor installed.
type Tracing struct {
	// OTLPEndpoint is an OTLP/gRPC collector: host:port (plaintext) or a URL
	// (https://host:port for TLS).
	OTLPEndpoint string
	// FromEnv turns tracing on with the exporter configured by the standard
	// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, TLS), when OTLPEndpoint is empty.
	FromEnv bool
}

// RegisterFlags registers --otlp-endpoint.
func (t *Tracing) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&t.OTLPEndpoint, "otlp-endpoint", "",
		"send OpenTelemetry traces over OTLP/gRPC to this collector (host:port in cleartext, or https://host:port); "+
			"off when empty unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set")
}

// TracingFromEnv turns tracing on from the standard OpenTelemetry variables when no
// --otlp-endpoint was given.
func (t *Tracing) TracingFromEnv(getenv func(string) string) {
	if t.OTLPEndpoint == "" && (getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		t.FromEnv = true
	}
}

// Enabled reports whether traces are exported.
func (t Tracing) Enabled() bool { return t.OTLPEndpoint != "" || t.FromEnv }

// StartTracing sets the process's tracer provider and W3C trace-context propagator
// (otel's globals, which every instrumentation library reads) when t is enabled.
// The returned function flushes the spans still buffered; call it at exit.
func StartTracing(ctx context.Context, t Tracing, service string) (func(context.Context) error, error) {
	if !t.Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	var opts []otlptracegrpc.Option
	switch e := t.OTLPEndpoint; {
	case strings.Contains(e, "://"):
		opts = append(opts, otlptracegrpc.WithEndpointURL(e))
	case e != "":
		opts = append(opts, otlptracegrpc.WithEndpoint(e), otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint %q: %w", t.OTLPEndpoint, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName("tandem-"+service)))
	if err != nil {
		return nil, errors.Join(err, exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}

// traceHandler adds the trace and span ids of the context's span to every line
// logged with a context, so that a log line leads to its trace.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}
func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

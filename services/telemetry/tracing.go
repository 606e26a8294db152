package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
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

// Tracer is a process's tracing: one OTLP exporter, and a tracer provider per
// service, so that under tandem up each span names the service that made it.
type Tracer struct {
	exp       sdktrace.SpanExporter
	mu        sync.Mutex
	providers []*sdktrace.TracerProvider
}

// StartTracing opens the exporter and sets the W3C trace-context propagator
// (otel's global, which every instrumentation library reads) when t is enabled;
// it returns nil when tracing is off.
func StartTracing(ctx context.Context, t Tracing) (*Tracer, error) {
	if !t.Enabled() {
		return nil, nil
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
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return &Tracer{exp: exp}, nil
}

// Provider is service's tracer provider (service.name tandem-<service>), or nil
// when t is (tracing is off).
func (t *Tracer) Provider(service string) trace.TracerProvider {
	if t == nil {
		return nil
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName("tandem-"+service)))
	if err != nil {
		// Default's schema and a schemaless resource always merge.
		res = resource.NewSchemaless(semconv.ServiceName("tandem-" + service))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(sharedExporter{t.exp}), sdktrace.WithResource(res))
	t.mu.Lock()
	defer t.mu.Unlock()
	t.providers = append(t.providers, tp)
	return tp
}

// Shutdown flushes every provider's buffered spans and closes the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, tp := range t.providers {
		errs = append(errs, tp.Shutdown(ctx))
	}
	return errors.Join(append(errs, t.exp.Shutdown(ctx))...)
}

// sharedExporter is the process's exporter as one provider sees it: a provider's
// shutdown must not close it under the others.
type sharedExporter struct{ sdktrace.SpanExporter }

func (sharedExporter) Shutdown(context.Context) error { return nil }

// FromContext is a tracer provider that makes each span with the provider of the
// span already in the context (the service whose call it is), else with def. A
// client connection shared by the services of a process (tandem up's peer
// connections) thus names the calling service.
func FromContext(def trace.TracerProvider) trace.TracerProvider { return ctxProvider{def: def} }

type ctxProvider struct {
	embedded.TracerProvider
	def trace.TracerProvider
}

func (p ctxProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return ctxTracer{name: name, opts: opts, def: p.def}
}

type ctxTracer struct {
	embedded.Tracer
	name string
	opts []trace.TracerOption
	def  trace.TracerProvider
}

func (t ctxTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	tp := t.def
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		tp = s.TracerProvider()
	}
	return tp.Tracer(t.name, t.opts...).Start(ctx, name, opts...)
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

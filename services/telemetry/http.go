package telemetry

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
)

// TraceHTTP makes a server span of every API request h serves (the child of the
// request's W3C traceparent, or a new trace's root) and sends its trace id back in
// TraceHeader. Probes (/health, /ready) and the console start no trace.
func TraceHTTP(h http.Handler, tp trace.TracerProvider) http.Handler {
	withHeader := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
			w.Header().Set(TraceHeader, sc.TraceID().String())
		}
		h.ServeHTTP(w, r)
	})
	return otelhttp.NewHandler(withHeader, "http", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return r.Method + " " + r.URL.Path
	}), otelhttp.WithTracerProvider(tp), otelhttp.WithFilter(func(r *http.Request) bool {
		return strings.HasPrefix(r.URL.Path, "/v1/") || r.Header.Get("traceparent") != ""
	}))
}

// TraceTransport makes a client span of every request t sends (to a GPU engine
// server) within a traced request, and sends the span's traceparent with it, so
// that the engine's own spans join the request's trace. Background requests (the
// engine's metrics, scraped every second) start no trace.
func TraceTransport(t http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	return otelhttp.NewTransport(t, otelhttp.WithTracerProvider(FromContext(tp)), otelhttp.WithFilter(func(r *http.Request) bool {
		return trace.SpanFromContext(r.Context()).IsRecording()
	}), otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "engine " + r.Method + " " + r.URL.Path }))
}

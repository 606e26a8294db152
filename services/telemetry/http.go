package telemetry

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
)

// TraceHTTP makes a server span of every request h serves (the child of the
// request's W3C traceparent, or a new trace's root) and sends its trace id back in
// TraceHeader.
func TraceHTTP(h http.Handler, tp trace.TracerProvider) http.Handler {
	withHeader := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
			w.Header().Set(TraceHeader, sc.TraceID().String())
		}
		h.ServeHTTP(w, r)
	})
	return otelhttp.NewHandler(withHeader, "http", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return r.Method + " " + r.URL.Path
	}), otelhttp.WithTracerProvider(tp))
}

// TraceTransport makes a client span of every request t sends (to a GPU engine
// server) and sends the span's traceparent with it, so that the engine's own spans
// join the request's trace.
func TraceTransport(t http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	return otelhttp.NewTransport(t, otelhttp.WithTracerProvider(FromContext(tp)))
}

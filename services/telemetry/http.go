package telemetry

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
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
//
// The span ends when the response body is closed, with the status its reader
// gives (openaihttp.StreamEnder) when it gives one: a streamed completion answers
// 200 before its first token, and only its reader knows whether the stream then
// finished or broke. otelhttp alone would end the span at the body's EOF with
// the HTTP status's verdict, too early for the reader to say.
func TraceTransport(t http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	return &endingTransport{otelhttp.NewTransport(spanCapture{t}, otelhttp.WithTracerProvider(FromContext(tp)), otelhttp.WithFilter(func(r *http.Request) bool {
		return trace.SpanFromContext(r.Context()).IsRecording()
	}), otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "engine " + r.Method + " " + r.URL.Path }))}
}

// captured is what spanCapture saw inside otelhttp's transport: the client span
// and the response body before otelhttp wrapped it.
type captured struct {
	span trace.Span
	body io.ReadCloser
}

type capturedKey struct{}

// endingTransport hands the reader a body that ends the client span itself.
type endingTransport struct{ otel http.RoundTripper }

func (t *endingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c := &captured{}
	resp, err := t.otel.RoundTrip(r.WithContext(context.WithValue(r.Context(), capturedKey{}, c)))
	if err != nil || c.span == nil {
		return resp, err // failed (otelhttp ended the span) or not traced
	}
	// otelhttp's own wrapper of the body is dropped: it would end the span at EOF.
	resp.Body = &spanBody{ReadCloser: c.body, span: c.span}
	return resp, nil
}

// spanCapture runs inside otelhttp's transport, where the request's context
// holds the client span.
type spanCapture struct{ rt http.RoundTripper }

func (s spanCapture) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	c, _ := r.Context().Value(capturedKey{}).(*captured)
	if span := trace.SpanFromContext(r.Context()); err == nil && c != nil && span.IsRecording() {
		c.span, c.body = span, resp.Body
	}
	return resp, err
}

// spanBody ends the engine request's span when closed: Error on a failed read,
// else the status StreamEnded gave, else otelhttp's from the HTTP status. It is
// an openaihttp.StreamEnder (TestTraceTransportStreamStatus holds it to that;
// telemetry imports no engine package).
type spanBody struct {
	io.ReadCloser
	span trace.Span
	once sync.Once
}

func (b *spanBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.fail(err)
	}
	return n, err
}

func (b *spanBody) StreamEnded(err error) {
	if err != nil {
		b.fail(err)
		return
	}
	b.span.SetStatus(codes.Ok, "")
}

func (b *spanBody) fail(err error) {
	b.span.SetAttributes(semconv.ErrorTypeKey.String(fmt.Sprintf("%T", err)))
	b.span.SetStatus(codes.Error, err.Error())
}

func (b *spanBody) Close() error {
	b.once.Do(func() { b.span.End() })
	return b.ReadCloser.Close()
}

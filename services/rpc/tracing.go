package rpc

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/tandem-serve/tandem/services/telemetry"
)

// TraceInterceptor makes a server span of Connect, gRPC and gRPC-Web calls, the
// child of the caller's W3C traceparent. tandem's callers are its own services and
// users reporting their own traces, so the remote parent is trusted rather than
// merely linked. Only a service that takes users' requests (roots: the frontend)
// starts traces; the others trace only calls that carry a traceparent, so that
// background calls (watches, peers' info, discovery) make no trace of their own.
// Prometheus keeps the metrics; OpenTelemetry's would duplicate them.
func TraceInterceptor(tp trace.TracerProvider, roots bool) connect.Interceptor {
	i, err := otelconnect.NewInterceptor(otelconnect.WithTrustRemote(), otelconnect.WithoutMetrics(), otelconnect.WithTracerProvider(tp))
	if err != nil {
		// Only invalid options fail, and these are fixed.
		panic(err)
	}
	return traceFilter{otel: i, roots: roots}
}

type traceFilter struct {
	otel  connect.Interceptor
	roots bool
}

func (f traceFilter) want(h http.Header) bool { return f.roots || h.Get(traceparent) != "" }

// traceparent is W3C trace context's header.
const traceparent = "traceparent"

func (f traceFilter) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	traced := f.otel.WrapUnary(next)
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient && f.want(req.Header()) {
			return traced(ctx, req)
		}
		return next(ctx, req)
	}
}

func (f traceFilter) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (f traceFilter) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	traced := f.otel.WrapStreamingHandler(next)
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if f.want(conn.RequestHeader()) {
			return traced(ctx, conn)
		}
		return next(ctx, conn)
	}
}

// TraceGRPCServer makes a server span of the calls a grpc-go server handles (the
// KV port's handoff streams) that carry a traceparent, as their child.
func TraceGRPCServer(tp trace.TracerProvider) grpc.ServerOption {
	return grpc.StatsHandler(onlyTraced{inner: otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp)), want: func(ctx context.Context) bool {
		md, _ := metadata.FromIncomingContext(ctx)
		return len(md.Get(traceparent)) > 0
	}})
}

// traceClient makes a client span of the calls made within a traced request
// (a recording span in the context) and sends them its traceparent; background
// calls are left alone.
func traceClient(tp trace.TracerProvider) grpc.DialOption {
	return grpc.WithStatsHandler(onlyTraced{inner: otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(telemetry.FromContext(tp))),
		want: func(ctx context.Context) bool { return trace.SpanFromContext(ctx).IsRecording() }})
}

// onlyTraced passes to inner only the calls want accepts.
type onlyTraced struct {
	inner stats.Handler
	want  func(context.Context) bool
}

type tracedKey struct{}

func (h onlyTraced) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if !h.want(ctx) {
		return ctx
	}
	return context.WithValue(h.inner.TagRPC(ctx, info), tracedKey{}, true)
}

func (h onlyTraced) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if ctx.Value(tracedKey{}) != nil {
		h.inner.HandleRPC(ctx, s)
	}
}

func (h onlyTraced) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return h.inner.TagConn(ctx, info)
}

func (h onlyTraced) HandleConn(ctx context.Context, s stats.ConnStats) { h.inner.HandleConn(ctx, s) }

// traceID is the trace id of the context's span, or "" when there is none.
func traceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// setTraceHeader sends the trace id to a grpc-go caller.
func setTraceHeader(ctx context.Context) {
	if id := traceID(ctx); id != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(telemetry.TraceHeader, id))
	}
}

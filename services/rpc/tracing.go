package rpc

import (
	"context"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tandem-serve/tandem/services/telemetry"
)

// TraceInterceptor makes a server span of every Connect, gRPC and gRPC-Web call,
// the child of the caller's W3C traceparent. tandem's callers are its own services
// and users reporting their own traces, so the remote parent is trusted rather than
// merely linked. Prometheus keeps the metrics; OpenTelemetry's would duplicate them.
func TraceInterceptor(tp trace.TracerProvider) connect.Interceptor {
	i, err := otelconnect.NewInterceptor(otelconnect.WithTrustRemote(), otelconnect.WithoutMetrics(), otelconnect.WithTracerProvider(tp))
	if err != nil {
		// Only invalid options fail, and these are fixed.
		panic(err)
	}
	return i
}

// TraceGRPCServer makes a server span of every call a grpc-go server handles (the
// KV port's handoff streams), the child of the caller's traceparent.
func TraceGRPCServer(tp trace.TracerProvider) grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp)))
}

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

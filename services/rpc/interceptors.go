// Package rpc holds what every service-to-service call shares: Connect server
// interceptors (request id, logging, metrics) and grpc-go client connections with
// go-grpc-middleware interceptors (timeout, retry, logging, metrics).
package rpc

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/internal/requestid"
	"github.com/tandem-serve/tandem/services/telemetry"
)

// ServerMetrics counts and times every Connect call a service handles.
type ServerMetrics struct {
	handled *prometheus.CounterVec
	latency *prometheus.HistogramVec
}

// NewServerMetrics registers the server metrics with reg.
func NewServerMetrics(reg prometheus.Registerer) *ServerMetrics {
	m := &ServerMetrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_rpc_server_handled_total",
			Help: "RPCs completed by this service, by procedure and status code.",
		}, []string{"procedure", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_rpc_server_handling_seconds",
			Help:    "Time from an RPC's start to its end (for streams, the last message).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14),
		}, []string{"procedure"}),
	}
	reg.MustRegister(m.handled, m.latency)
	return m
}

func (m *ServerMetrics) observe(procedure string, start time.Time, err error) {
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	m.handled.WithLabelValues(procedure, code).Inc()
	m.latency.WithLabelValues(procedure).Observe(time.Since(start).Seconds())
}

// ServerInterceptor takes the request id from the x-request-id header (making one if
// absent), puts it in the context and the response header (with the trace id, when
// the call is traced), logs each call's end
// with it, and records metrics.
type ServerInterceptor struct {
	Logger  *slog.Logger
	Metrics *ServerMetrics
}

var _ connect.Interceptor = (*ServerInterceptor)(nil)

func (i *ServerInterceptor) begin(ctx context.Context, h interface{ Get(string) string }) (context.Context, string) {
	id := h.Get(requestid.Header)
	if id == "" {
		id = requestid.New()
	}
	return requestid.With(ctx, id), id
}

// end logs and counts a call's outcome. err must carry the code the caller is sent
// (coded for Connect, connectError for grpc-go). A cancelled call is the caller's
// choice, not a failure: it is logged at debug, like a success.
func (i *ServerInterceptor) end(ctx context.Context, procedure, id string, start time.Time, err error) {
	i.Metrics.observe(procedure, start, err)
	level := slog.LevelDebug
	attrs := []any{"procedure", procedure, "request_id", id, "duration", time.Since(start)}
	if err != nil {
		code := connect.CodeOf(err)
		attrs = append(attrs, "code", code.String(), "error", err.Error())
		switch code {
		case connect.CodeCanceled:
		case connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss:
			level = slog.LevelError
		default:
			level = slog.LevelWarn
		}
	}
	i.Logger.Log(ctx, level, "rpc", attrs...)
}

// coded gives err the code a Connect handler sends for it: a context error that is
// not already a Connect error (Connect's unary handler returns ctx.Err() as it is
// when the caller has gone before the call starts) is Canceled or DeadlineExceeded,
// as on the wire, not Unknown.
func coded(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return err
}

func (i *ServerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		start := time.Now()
		ctx, id := i.begin(ctx, req.Header())
		resp, err := next(ctx, req)
		if resp != nil {
			resp.Header().Set(requestid.Header, id)
			if t := traceID(ctx); t != "" {
				resp.Header().Set(telemetry.TraceHeader, t)
			}
		}
		i.end(ctx, req.Spec().Procedure, id, start, coded(err))
		return resp, err
	}
}

func (i *ServerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *ServerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		ctx, id := i.begin(ctx, conn.RequestHeader())
		conn.ResponseHeader().Set(requestid.Header, id)
		if t := traceID(ctx); t != "" {
			conn.ResponseHeader().Set(telemetry.TraceHeader, t)
		}
		err := next(ctx, conn)
		i.end(ctx, conn.Spec().Procedure, id, start, coded(err))
		return err
	}
}

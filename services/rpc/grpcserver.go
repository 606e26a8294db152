package rpc

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"connectrpc.com/connect"
	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/internal/requestid"
)

// GRPCServerOptions give a grpc-go server the behaviour of the Connect handlers:
// the request id, the rpc log line and tandem_rpc_server_* metrics from the same
// interceptor, and a panic turned into Internal for that call alone.
func (i *ServerInterceptor) GRPCServerOptions() []grpc.ServerOption {
	recover := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		i.Logger.ErrorContext(ctx, "panic in handler", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(i.grpcUnary, recovery.UnaryServerInterceptor(recover)),
		grpc.ChainStreamInterceptor(i.grpcStream, recovery.StreamServerInterceptor(recover)),
	}
}

type mdGetter metadata.MD

func (m mdGetter) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (i *ServerInterceptor) grpcBegin(ctx context.Context) (context.Context, string) {
	md, _ := metadata.FromIncomingContext(ctx)
	ctx, id := i.begin(ctx, mdGetter(md))
	_ = grpc.SetHeader(ctx, metadata.Pairs(requestid.Header, id))
	setTraceHeader(ctx)
	return ctx, id
}

// connectError lets end read a grpc-go status like a Connect error, with the code
// grpc-go sends for it: a context error the handler returns is Canceled or
// DeadlineExceeded, not Unknown.
func connectError(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		s = status.FromContextError(err)
	}
	return connect.NewError(connect.Code(s.Code()), err)
}

func (i *ServerInterceptor) grpcUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	ctx, id := i.grpcBegin(ctx)
	resp, err := handler(ctx, req)
	i.end(ctx, info.FullMethod, id, start, connectError(err))
	return resp, err
}

func (i *ServerInterceptor) grpcStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	ctx, id := i.grpcBegin(ss.Context())
	wrapped := middleware.WrapServerStream(ss)
	wrapped.WrappedContext = ctx
	err := handler(srv, wrapped)
	i.end(ctx, info.FullMethod, id, start, connectError(err))
	return err
}

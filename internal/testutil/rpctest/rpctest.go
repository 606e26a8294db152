package rpctest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Context is a context that ends when the test does, or after 20 s: a call that
// hangs fails the test instead of the suite's timeout.
func Context(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(tb.Context(), 20*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// Code reads the status code from a Connect or grpc-go error; both number their
// codes alike. An error that carries none is Unknown.
func Code(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	if s, ok := status.FromError(err); ok {
		return connect.Code(s.Code())
	}
	return connect.CodeUnknown
}

// Call runs one server-streaming call to its end and returns every message and
// the error the stream ended with (nil for a clean end).
type Call[Req, Res any] struct {
	Name string
	Do   func(ctx context.Context, req *Req) ([]*Res, error)
}

// ConnectCall calls procedure (e.g. fooconnect.FooServiceBarProcedure) at url
// with Connect's client, in opts' protocol (Connect's own by default).
func ConnectCall[Req, Res any](name string, c *http.Client, url, procedure string, opts ...connect.ClientOption) Call[Req, Res] {
	client := connect.NewClient[Req, Res](c, url+procedure, opts...)
	return Call[Req, Res]{Name: name, Do: func(ctx context.Context, req *Req) ([]*Res, error) {
		stream, err := client.CallServerStream(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		defer stream.Close()
		var out []*Res
		for stream.Receive() {
			out = append(out, stream.Msg())
		}
		return out, stream.Err()
	}}
}

// GRPCCall calls procedure over cc with grpc-go's client.
func GRPCCall[Req, Res any](name string, cc grpc.ClientConnInterface, procedure string) Call[Req, Res] {
	desc := &grpc.StreamDesc{ServerStreams: true}
	return Call[Req, Res]{Name: name, Do: func(ctx context.Context, req *Req) ([]*Res, error) {
		stream, err := cc.NewStream(ctx, desc, procedure)
		if err != nil {
			return nil, err
		}
		if err := stream.SendMsg(req); err != nil {
			return nil, err
		}
		if err := stream.CloseSend(); err != nil {
			return nil, err
		}
		var out []*Res
		for {
			m := new(Res)
			err := stream.RecvMsg(m)
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return out, err
			}
			out = append(out, m)
		}
	}}
}

// ServeStream serves h, a Connect handler, and returns procedure's calls through
// both clients: "connect" (Connect's protocol) and "grpc" (grpc-go).
func ServeStream[Req, Res any](tb testing.TB, h http.Handler, procedure string) []Call[Req, Res] {
	tb.Helper()
	srv := NewServer(tb, h)
	return []Call[Req, Res]{
		ConnectCall[Req, Res]("connect", Client(tb), srv.URL, procedure),
		GRPCCall[Req, Res]("grpc", GRPCConn(tb, srv), procedure),
	}
}

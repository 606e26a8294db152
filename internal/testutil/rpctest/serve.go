// Package rpctest is the scaffolding tandem's RPC tests share, after grpc-go's
// internal/grpctest: serving handlers the way tandem's services serve them (HTTP/1
// and cleartext HTTP/2 on one port), clients that call them over HTTP/2 (Connect's,
// any protocol, and grpc-go's), calls of a server stream through both, a test's
// context, and the status code of either client's error.
package rpctest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// NewServer serves h on loopback until the test ends. Closing it earlier is fine.
func NewServer(tb testing.TB, h http.Handler) *httptest.Server {
	tb.Helper()
	srv := httptest.NewUnstartedServer(h)
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = p
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv
}

// Client speaks cleartext HTTP/2 with prior knowledge, which Connect's gRPC
// protocol and bidirectional streams need. Its idle connections close when the
// test ends.
func Client(tb testing.TB) *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// Addr is srv's host:port, as a grpc-go target.
func Addr(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

// GRPCConn is a grpc-go connection to srv in cleartext, closed when the test ends.
func GRPCConn(tb testing.TB, srv *httptest.Server, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	return Dial(tb, Addr(srv), opts...)
}

// Dial is a grpc-go connection to addr (host:port) in cleartext, closed when the
// test ends.
func Dial(tb testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

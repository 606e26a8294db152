package rpc_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/internal/requestid"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	decodev1 "github.com/tandem-serve/tandem/proto/tandem/decode/v1"
	"github.com/tandem-serve/tandem/proto/tandem/decode/v1/decodev1connect"
	_ "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/proto/tandem/router/v1/routerv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/proto/tandem/worker/v1/workerv1connect"
	"github.com/tandem-serve/tandem/services/rpc"
	"github.com/tandem-serve/tandem/services/server"
)

func TestIsIdempotent(t *testing.T) {
	for method, want := range map[string]bool{
		"/tandem.router.v1.RouterService/Route":        true,
		"/tandem.router.v1.RouterService/ListWorkers":  true,
		"/tandem.worker.v1.WorkerService/WatchEvents":  true,
		"/tandem.worker.v1.WorkerService/Info":         true,
		"/tandem.decode.v1.DecodeService/Generate":     false,
		"/tandem.prefill.v1.PrefillService/Prefill":    false,
		"/tandem.router.v1.RouterService/NoSuchMethod": false,
		"/tandem.router.v1.RouterService":              false,
		"/tandem.router.v1.RouteRequest/prompt_tokens": false,
		"": false,
	} {
		if got := rpc.IsIdempotent(method); got != want {
			t.Errorf("IsIdempotent(%q) = %v, want %v", method, got, want)
		}
	}
}

// seen records what each call's handler saw.
type seen struct {
	mu      sync.Mutex
	headers []string // x-request-id as received
	ctxIDs  []string // request id in the handler's context
}

func (s *seen) add(h, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.headers = append(s.headers, h)
	s.ctxIDs = append(s.ctxIDs, id)
}

func (s *seen) last(t *testing.T) (string, string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.headers) == 0 {
		t.Fatal("handler never called")
	}
	return s.headers[len(s.headers)-1], s.ctxIDs[len(s.ctxIDs)-1]
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.headers)
}

type workerSvc struct {
	workerv1connect.UnimplementedWorkerServiceHandler
	seen *seen
}

func (w workerSvc) Info(ctx context.Context, req *connect.Request[workerv1.InfoRequest]) (*connect.Response[workerv1.InfoResponse], error) {
	w.seen.add(req.Header().Get(requestid.Header), requestid.From(ctx))
	return connect.NewResponse(&workerv1.InfoResponse{Info: &workerv1.WorkerInfo{Id: "w"}}), nil
}

func (w workerSvc) WatchEvents(ctx context.Context, req *connect.Request[workerv1.WatchEventsRequest],
	s *connect.ServerStream[workerv1.WatchEventsResponse]) error {
	w.seen.add(req.Header().Get(requestid.Header), requestid.From(ctx))
	return s.Send(&workerv1.WatchEventsResponse{Incarnation: "i"})
}

// routerSvc fails Route with Unavailable until failures run out.
type routerSvc struct {
	routerv1connect.UnimplementedRouterServiceHandler
	seen     *seen
	mu       sync.Mutex
	failures int
}

func (r *routerSvc) Route(ctx context.Context, req *connect.Request[routerv1.RouteRequest]) (*connect.Response[routerv1.RouteResponse], error) {
	r.seen.add(req.Header().Get(requestid.Header), requestid.From(ctx))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures > 0 {
		r.failures--
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("not yet"))
	}
	return connect.NewResponse(&routerv1.RouteResponse{Reason: "ok"}), nil
}

// decodeSvc always fails Generate with Unavailable.
type decodeSvc struct {
	decodev1connect.UnimplementedDecodeServiceHandler
	seen *seen
}

func (d decodeSvc) Generate(ctx context.Context, req *connect.Request[decodev1.GenerateRequest], _ *connect.ServerStream[decodev1.GenerateResponse]) error {
	d.seen.add(req.Header().Get(requestid.Header), requestid.From(ctx))
	return connect.NewError(connect.CodeUnavailable, errors.New("draining"))
}

type fixture struct {
	seen    *seen
	router  *routerSvc
	reg     *prometheus.Registry
	conn    *grpc.ClientConn
	worker  workerv1.WorkerServiceClient
	routerC routerv1.RouterServiceClient
	decodeC decodev1.DecodeServiceClient
}

// start serves the fakes behind rpc.ServerInterceptor on a real server and dials
// it with rpc.Clients, as service-to-service calls are made.
func start(t *testing.T) *fixture {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	f := &fixture{seen: &seen{}, reg: reg}
	f.router = &routerSvc{seen: f.seen}
	opts := server.HandlerOptions(logger, &rpc.ServerInterceptor{Logger: logger, Metrics: rpc.NewServerMetrics(reg)})
	srv, err := server.New(server.Config{Addr: "127.0.0.1:0", Grace: time.Second, Logger: logger, Gatherer: reg}, []server.Handler{
		server.Mount(workerv1connect.WorkerServiceName)(workerv1connect.NewWorkerServiceHandler(workerSvc{seen: f.seen}, opts...)),
		server.Mount(routerv1connect.RouterServiceName)(routerv1connect.NewRouterServiceHandler(f.router, opts...)),
		server.Mount(decodev1connect.DecodeServiceName)(decodev1connect.NewDecodeServiceHandler(decodeSvc{seen: f.seen}, opts...)),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	clients := rpc.NewClients(rpc.ClientConfig{UnaryTimeout: 5 * time.Second, Retries: 2, Logger: logger}, prometheus.NewRegistry())
	conn, err := clients.Dial(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	f.conn = conn
	f.worker = workerv1.NewWorkerServiceClient(conn)
	f.routerC = routerv1.NewRouterServiceClient(conn)
	f.decodeC = decodev1.NewDecodeServiceClient(conn)
	return f
}

func TestRequestIDPropagates(t *testing.T) {
	f := start(t)

	t.Run("unary", func(t *testing.T) {
		var hdr metadata.MD
		ctx := requestid.With(rpctest.Context(t), "req-unary-1")
		if _, err := f.worker.Info(ctx, &workerv1.InfoRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatal(err)
		}
		h, id := f.seen.last(t)
		if h != "req-unary-1" || id != "req-unary-1" {
			t.Errorf("server saw header %q and context id %q, want req-unary-1", h, id)
		}
		if got := hdr.Get(requestid.Header); len(got) != 1 || got[0] != "req-unary-1" {
			t.Errorf("response header x-request-id %v, want [req-unary-1]", got)
		}
	})

	t.Run("stream", func(t *testing.T) {
		ctx := requestid.With(rpctest.Context(t), "req-stream-2")
		s, err := f.worker.WatchEvents(ctx, &workerv1.WatchEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		hdr, err := s.Header()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("stream end: %v", err)
		}
		h, id := f.seen.last(t)
		if h != "req-stream-2" || id != "req-stream-2" {
			t.Errorf("server saw header %q and context id %q, want req-stream-2", h, id)
		}
		if got := hdr.Get(requestid.Header); len(got) != 1 || got[0] != "req-stream-2" {
			t.Errorf("response header x-request-id %v, want [req-stream-2]", got)
		}
	})

	t.Run("absent", func(t *testing.T) {
		var hdr metadata.MD
		if _, err := f.worker.Info(rpctest.Context(t), &workerv1.InfoRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatal(err)
		}
		h, id := f.seen.last(t)
		if h != "" {
			t.Errorf("a request without an id arrived with header %q", h)
		}
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Errorf("server made request id %q, want 32 hex digits", id)
		}
		if got := hdr.Get(requestid.Header); len(got) != 1 || got[0] != id {
			t.Errorf("response header x-request-id %v, want the id the server made, %q", got, id)
		}
	})
}

func TestServerMetricsCountCalls(t *testing.T) {
	f := start(t)
	for range 3 {
		if _, err := f.worker.Info(rpctest.Context(t), &workerv1.InfoRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := f.decodeC.Generate(rpctest.Context(t), &decodev1.GenerateRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Generate: %v", err)
	}
	want := map[[2]string]float64{
		{workerv1connect.WorkerServiceInfoProcedure, "ok"}:              3,
		{decodev1connect.DecodeServiceGenerateProcedure, "unavailable"}: 1,
	}
	got := map[[2]string]float64{}
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_rpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[[2]string{label(m, "procedure"), label(m, "code")}] = m.GetCounter().GetValue()
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("tandem_rpc_server_handled_total%v = %g, want %g (all: %v)", k, got[k], v, got)
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestRetriesOnlyIdempotent(t *testing.T) {
	f := start(t)
	f.router.mu.Lock()
	f.router.failures = 1
	f.router.mu.Unlock()
	ctx := requestid.With(rpctest.Context(t), "req-retry")
	resp, err := f.routerC.Route(ctx, &routerv1.RouteRequest{PromptTokens: 1})
	if err != nil {
		t.Fatalf("Route (NO_SIDE_EFFECTS) after one Unavailable: %v, want a successful retry", err)
	}
	if resp.GetReason() != "ok" || f.seen.count() != 2 {
		t.Fatalf("Route answered %q after %d calls, want ok after 2", resp.GetReason(), f.seen.count())
	}
	// The retry carries the same request id.
	if h, _ := f.seen.last(t); h != "req-retry" {
		t.Errorf("retried call carried request id %q", h)
	}

	before := f.seen.count()
	s, err := f.decodeC.Generate(rpctest.Context(t), &decodev1.GenerateRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Generate: %v, want Unavailable", err)
	}
	if n := f.seen.count() - before; n != 1 {
		t.Fatalf("Generate (not idempotent) was called %d times, want 1: it must never be retried", n)
	}
}

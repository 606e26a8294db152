package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"

	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	routerv1 "github.com/tandem-serve/tandem/proto/tandem/router/v1"
	"github.com/tandem-serve/tandem/proto/tandem/router/v1/routerv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/proto/tandem/worker/v1/workerv1connect"
	"github.com/tandem-serve/tandem/services/server"
	"github.com/tandem-serve/tandem/worker"
)

// gate is a WorkerService whose WatchEvents sends one message, then waits for
// release before sending a last one and returning, and whose Info panics when told.
type gate struct {
	workerv1connect.UnimplementedWorkerServiceHandler
	started chan struct{}
	release chan struct{}
	once    sync.Once

	mu    sync.Mutex
	panic bool
}

func newGate() *gate { return &gate{started: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) Info(context.Context, *connect.Request[workerv1.InfoRequest]) (*connect.Response[workerv1.InfoResponse], error) {
	g.mu.Lock()
	p := g.panic
	g.mu.Unlock()
	if p {
		panic("boom")
	}
	return connect.NewResponse(&workerv1.InfoResponse{Info: &workerv1.WorkerInfo{Id: "gate"}}), nil
}

func (g *gate) WatchEvents(ctx context.Context, _ *connect.Request[workerv1.WatchEventsRequest], s *connect.ServerStream[workerv1.WatchEventsResponse]) error {
	if err := s.Send(&workerv1.WatchEventsResponse{Incarnation: "first"}); err != nil {
		return err
	}
	g.once.Do(func() { close(g.started) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Send(&workerv1.WatchEventsResponse{Incarnation: "last"})
}

func (g *gate) setPanic(p bool) {
	g.mu.Lock()
	g.panic = p
	g.mu.Unlock()
}

type running struct {
	srv    *server.Server
	cancel context.CancelFunc
	done   chan error
	conn   *grpc.ClientConn
}

var logger = slog.New(slog.DiscardHandler)

// start builds a server with a worker service (the gate) and a router service,
// with the handler options every tandem service uses, and serves it.
func start(t *testing.T, g *gate, reg *prometheus.Registry, grace time.Duration) *running {
	t.Helper()
	opts := server.HandlerOptions(logger)
	handlers := []server.Handler{
		server.Mount(workerv1connect.WorkerServiceName)(workerv1connect.NewWorkerServiceHandler(g, opts...)),
		server.Mount(routerv1connect.RouterServiceName)(routerv1connect.NewRouterServiceHandler(routerv1connect.UnimplementedRouterServiceHandler{}, opts...)),
	}
	srv, err := server.New(server.Config{Addr: "127.0.0.1:0", Grace: grace, Logger: logger, Gatherer: reg}, handlers, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(grace + 10*time.Second):
			t.Error("Serve did not return")
		}
	})
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r.conn = conn
	return r
}

func TestHealth(t *testing.T) {
	r := start(t, newGate(), prometheus.NewRegistry(), time.Second)
	hc := healthpb.NewHealthClient(r.conn)
	services := []string{"", workerv1connect.WorkerServiceName, routerv1connect.RouterServiceName}
	check := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, name := range services {
			resp, err := hc.Check(rpctest.Context(t), &healthpb.HealthCheckRequest{Service: name})
			if err != nil {
				t.Fatalf("Check(%q): %v", name, err)
			}
			if resp.GetStatus() != want {
				t.Errorf("Check(%q) = %v, want %v", name, resp.GetStatus(), want)
			}
		}
	}
	check(healthpb.HealthCheckResponse_NOT_SERVING)
	r.srv.SetServing(true)
	check(healthpb.HealthCheckResponse_SERVING)
	r.srv.SetServing(false)
	check(healthpb.HealthCheckResponse_NOT_SERVING)

	// A service the server does not run is unknown, not healthy.
	_, err := hc.Check(rpctest.Context(t), &healthpb.HealthCheckRequest{Service: "tandem.nothing.v1.NothingService"})
	if status.Code(err).String() != "NotFound" {
		t.Errorf("Check of an unknown service: %v, want NotFound", err)
	}
}

func TestReflection(t *testing.T) {
	r := start(t, newGate(), prometheus.NewRegistry(), time.Second)
	stream, err := reflectionpb.NewServerReflectionClient(r.conn).ServerReflectionInfo(rpctest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{workerv1connect.WorkerServiceName, routerv1connect.RouterServiceName, "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
	// The descriptors themselves are served, so grpcurl can call the service.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: workerv1connect.WorkerServiceName},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("no file descriptor for %s: %v", workerv1connect.WorkerServiceName, resp.GetErrorResponse())
	}
	_ = stream.CloseSend()

	// Older clients (grpcurl before v1.8.8, many IDEs) speak only v1alpha.
	alpha, err := reflectionv1alpha.NewServerReflectionClient(r.conn).ServerReflectionInfo(rpctest.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := alpha.Send(&reflectionv1alpha.ServerReflectionRequest{
		MessageRequest: &reflectionv1alpha.ServerReflectionRequest_ListServices{ListServices: "*"},
	}); err != nil {
		t.Fatal(err)
	}
	aresp, err := alpha.Recv()
	if err != nil {
		t.Fatalf("reflection v1alpha: %v", err)
	}
	names = names[:0]
	for _, s := range aresp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, workerv1connect.WorkerServiceName) {
		t.Errorf("reflection v1alpha lists %v, missing %s", names, workerv1connect.WorkerServiceName)
	}
	_ = alpha.CloseSend()
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "tandem_server_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	r := start(t, newGate(), reg, time.Second)
	req, err := http.NewRequestWithContext(rpctest.Context(t), http.MethodGet, "http://"+r.srv.Addr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	if !strings.Contains(string(body), "tandem_server_test_total 3") {
		t.Errorf("/metrics does not show the registered counter:\n%s", body)
	}
}

func TestHandlerPanicIsInternal(t *testing.T) {
	g := newGate()
	r := start(t, g, prometheus.NewRegistry(), time.Second)
	cc := workerv1connect.NewWorkerServiceClient(rpctest.Client(t), "http://"+r.srv.Addr())
	gc := workerv1.NewWorkerServiceClient(r.conn)
	g.setPanic(true)
	_, err := cc.Info(rpctest.Context(t), connect.NewRequest(&workerv1.InfoRequest{}))
	if connect.CodeOf(err) != connect.CodeInternal {
		t.Errorf("Connect: panic gave %v, want internal", err)
	}
	_, err = gc.Info(rpctest.Context(t), &workerv1.InfoRequest{})
	if got := connect.Code(status.Code(err)); got != connect.CodeInternal {
		t.Errorf("gRPC: panic gave %v, want internal", err)
	}
	if err != nil && strings.Contains(err.Error(), "boom") {
		t.Errorf("the panic value leaked to the caller: %v", err)
	}
	// The server keeps serving, on the same connections and new ones.
	g.setPanic(false)
	if resp, err := cc.Info(rpctest.Context(t), connect.NewRequest(&workerv1.InfoRequest{})); err != nil || resp.Msg.GetInfo().GetId() != "gate" {
		t.Errorf("Connect after a panic: %v, %v", resp, err)
	}
	if resp, err := gc.Info(rpctest.Context(t), &workerv1.InfoRequest{}); err != nil || resp.GetInfo().GetId() != "gate" {
		t.Errorf("gRPC after a panic: %v, %v", resp, err)
	}
	hc := healthpb.NewHealthClient(r.conn)
	if _, err := hc.Check(rpctest.Context(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health after a panic: %v", err)
	}
}

// TestGracefulShutdown: after the context ends the drain hooks (deregistration)
// run while health still says SERVING, then health turns NOT_SERVING, an in-flight
// stream runs to its end, and Serve returns.
func TestGracefulShutdown(t *testing.T) {
	for _, kind := range []string{"connect", "grpc"} {
		t.Run(kind, func(t *testing.T) {
			g := newGate()
			const grace = 20 * time.Second // far beyond what the stream needs; only a bound
			r := start(t, g, prometheus.NewRegistry(), grace)
			r.srv.SetServing(true)
			hc := healthpb.NewHealthClient(r.conn)
			hookHealth := make(chan healthpb.HealthCheckResponse_ServingStatus, 1)
			r.srv.OnDrain(func() {
				resp, err := hc.Check(rpctest.Context(t), &healthpb.HealthCheckRequest{})
				if err != nil {
					t.Errorf("health during drain: %v", err)
				}
				hookHealth <- resp.GetStatus()
			})

			var recv func() (*workerv1.WatchEventsResponse, error)
			switch kind {
			case "connect":
				s, err := workerv1connect.NewWorkerServiceClient(rpctest.Client(t), "http://"+r.srv.Addr()).
					WatchEvents(rpctest.Context(t), connect.NewRequest(&workerv1.WatchEventsRequest{}))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				recv = func() (*workerv1.WatchEventsResponse, error) {
					if s.Receive() {
						return s.Msg(), nil
					}
					if s.Err() != nil {
						return nil, s.Err()
					}
					return nil, io.EOF
				}
			case "grpc":
				s, err := workerv1.NewWorkerServiceClient(r.conn).WatchEvents(rpctest.Context(t), &workerv1.WatchEventsRequest{})
				if err != nil {
					t.Fatal(err)
				}
				recv = s.Recv
			}
			if msg, err := recv(); err != nil || msg.GetIncarnation() != "first" {
				t.Fatalf("first message: %v, %v", msg, err)
			}
			<-g.started

			r.cancel()
			select {
			case st := <-hookHealth:
				if st != healthpb.HealthCheckResponse_SERVING {
					t.Errorf("health %v when the drain hook ran, want SERVING (deregistration comes first)", st)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("drain hook never ran")
			}
			select {
			case err := <-r.done:
				t.Fatalf("Serve returned (%v) while a stream was in flight", err)
			default:
			}
			// The hook has returned; NOT_SERVING follows it at once, while the stream
			// is still held open by the gate.
			deadline := time.Now().Add(10 * time.Second)
			for r.srv.HealthStatus() != grpchealth.StatusNotServing && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if st := r.srv.HealthStatus(); st != grpchealth.StatusNotServing {
				t.Errorf("health %v while draining an in-flight stream, want NOT_SERVING", st)
			}

			close(g.release)
			msg, err := recv()
			if err != nil || msg.GetIncarnation() != "last" {
				t.Fatalf("in-flight stream cut off during shutdown: %v, %v", msg, err)
			}
			if _, err := recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("in-flight stream did not end cleanly: %v", err)
			}
			select {
			case err := <-r.done:
				if err != nil {
					t.Fatalf("Serve: %v", err)
				}
				r.done <- nil // for the cleanup
			case <-time.After(grace):
				t.Fatal("Serve did not return after the last stream ended")
			}
		})
	}
}

// TestShutdownClosesWatchersAfterGrace: a stream that never ends by itself (a
// router's WatchEvents subscription) does not hold shutdown past the grace period.
func TestShutdownClosesWatchersAfterGrace(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ws := worker.New("w1", "i1", workerv1.WorkerMode_WORKER_MODE_DECODE, "dev", eng)
	ws.Heartbeat = 20 * time.Millisecond
	srv, err := server.New(server.Config{Addr: "127.0.0.1:0", Grace: 200 * time.Millisecond, Logger: logger, Gatherer: prometheus.NewRegistry()},
		[]server.Handler{server.Mount(workerv1connect.WorkerServiceName)(workerv1connect.NewWorkerServiceHandler(ws, server.HandlerOptions(logger)...))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s, err := workerv1.NewWorkerServiceClient(conn).WatchEvents(rpctest.Context(t), &workerv1.WatchEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return with a watcher connected")
	}
	// The watcher learns the server is gone.
	for range 1000 {
		if _, err := s.Recv(); err != nil {
			return
		}
	}
	t.Fatal("watch stream still delivering after the server stopped")
}

// Keep the router import honest: the mounted router answers Unimplemented, not 404.
func TestMountedUnimplemented(t *testing.T) {
	r := start(t, newGate(), prometheus.NewRegistry(), time.Second)
	_, err := routerv1.NewRouterServiceClient(r.conn).Route(rpctest.Context(t), &routerv1.RouteRequest{PromptTokens: 1})
	if got := status.Code(err).String(); got != "Unimplemented" {
		t.Fatalf("Route on a mounted but unimplemented service: %v", err)
	}
}

// One client connection holds many more streams at once than Go's default
// HTTP/2 limit (250): a frontend carries every request to a worker on one
// connection, and past the limit grpc-go would hold new calls back, a queue no
// worker could see.
func TestOneConnectionHoldsManyStreams(t *testing.T) {
	g := newGate()
	r := start(t, g, prometheus.NewRegistry(), time.Second)
	ctx, cancel := context.WithTimeout(rpctest.Context(t), 20*time.Second)
	defer cancel()
	client := workerv1.NewWorkerServiceClient(r.conn)
	const n = 600
	var wg sync.WaitGroup
	var mu sync.Mutex
	var streams []grpc.ServerStreamingClient[workerv1.WatchEventsResponse]
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			s, err := client.WatchEvents(ctx, &workerv1.WatchEventsRequest{})
			if err == nil {
				_, err = s.Recv()
			}
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			streams = append(streams, s)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("%d of %d streams open at once on one connection; then: %v", len(streams), n, err)
	}
	close(g.release)
	for _, s := range streams {
		if m, err := s.Recv(); err != nil || m.GetIncarnation() != "last" {
			t.Fatalf("stream after release: %v, %v", m, err)
		}
	}
}

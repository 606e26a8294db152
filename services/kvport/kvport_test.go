package kvport_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/tandem-serve/tandem/handoff"
	"github.com/tandem-serve/tandem/services/kvport"
)

func start(t *testing.T, grace time.Duration) (*kvport.Server, *grpc.ClientConn, context.CancelFunc, <-chan error) {
	t.Helper()
	s, err := kvport.New(kvport.Config{Addr: "127.0.0.1:0", Grace: grace, Logger: slog.New(slog.DiscardHandler)}, func(grpc.ServiceRegistrar) {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// done gets Serve's result, then is closed, so that the cleanup can wait on it
	// after a test has read it.
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx); close(done) }()
	cc, err := grpc.NewClient(s.Addr(), append(handoff.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-done
		cc.Close()
	})
	return s, cc, cancel, done
}

// The port says NOT_SERVING until the worker is ready, and lists what it serves.
func TestHealthAndReflection(t *testing.T) {
	s, cc, _, _ := start(t, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := healthpb.NewHealthClient(cc)
	for _, serving := range []bool{false, true, false} {
		s.SetServing(serving)
		want := healthpb.HealthCheckResponse_NOT_SERVING
		if serving {
			want = healthpb.HealthCheckResponse_SERVING
		}
		resp, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != want {
			t.Fatalf("SetServing(%v): health %v, %v; want %v", serving, resp.GetStatus(), err, want)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	found := false
	for _, n := range names {
		found = found || n == "grpc.health.v1.Health"
	}
	if !found {
		t.Errorf("reflection lists %v, want grpc.health.v1.Health among them", names)
	}
}

// Shutdown waits for in-flight streams only as long as the grace period: a stream
// that never ends (here a health watch) is cut, and Serve returns.
func TestShutdownCutsStreamsAfterGrace(t *testing.T) {
	s, cc, cancelServe, done := start(t, 200*time.Millisecond)
	s.SetServing(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch message %v, %v", resp, err)
	}
	cancelServe()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return after its grace period with a stream still open")
	}
	for {
		if _, err := watch.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatal("the watch ended cleanly; want it cut")
			}
			break
		}
	}
}

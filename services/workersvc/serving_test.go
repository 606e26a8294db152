package workersvc

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tandem-serve/tandem/services/process"
	"github.com/tandem-serve/tandem/services/tlsconf"
)

// startTestWorker starts a sim worker of the given mode with flags args and runs
// it until the test ends.
func startTestWorker(t *testing.T, mode string, args ...string) *Service {
	t.Helper()
	var cfg Config
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	cfg.RegisterFlags(fs, mode)
	if err := fs.Parse(append([]string{"--engine", "sim", "--sim-time-scale", "0", "--drain-timeout", "100ms"}, args...)); err != nil {
		t.Fatal(err)
	}
	env, err := process.NewEnv(slog.New(slog.DiscardHandler), tlsconf.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, env, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; env.Peers.Close() })
	return s
}

func health(t *testing.T, addr string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health of %s: %v", addr, err)
	}
	return r.GetStatus()
}

// A decode worker says SERVING only once it knows its static prefill worker:
// before, it served at once, and a request the router sent with that worker's id
// fell back (unknown_prefill_worker) while everything said SERVING.
func TestDecodeServesOnceItKnowsItsPrefillWorker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	preAddr := ln.Addr().String()
	ln.Close() // the prefill worker will listen here, later

	dec := startTestWorker(t, "decode", "--id", "d", "--prefill-workers", preAddr)
	agg := startTestWorker(t, "decode", "--id", "a", "--mode", "aggregated", "--prefill-workers", preAddr)
	// Long enough for the directory to have asked, and for a worker that did not
	// wait to have said SERVING long ago.
	time.Sleep(time.Second)
	if st := health(t, dec.Addr()); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("decode worker whose prefill worker is not up yet says %v, want NOT_SERVING", st)
	}
	if _, ok := dec.prefill.Client("p"); ok {
		t.Fatal("the prefill worker is known before it started")
	}
	// An aggregated worker never calls a prefill worker: it waits for none.
	if st := health(t, agg.Addr()); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("aggregated worker says %v, want SERVING", st)
	}

	startTestWorker(t, "prefill", "--id", "p", "--listen", preAddr, "--kv-listen", "127.0.0.1:0")
	deadline := time.Now().Add(20 * time.Second)
	for health(t, dec.Addr()) != healthpb.HealthCheckResponse_SERVING {
		if time.Now().After(deadline) {
			t.Fatalf("decode worker not SERVING after its prefill worker started; awaiting %v", dec.dir.Awaiting())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Once it serves, the router's suggestion resolves: the first request can go remote.
	if _, ok := dec.prefill.Client("p"); !ok {
		t.Fatal("SERVING, but prefill worker p is unknown")
	}
}

package discovery_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/internal/testutil"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/proto/tandem/worker/v1/workerv1connect"
	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services/discovery"
	"github.com/tandem-serve/tandem/services/server"
	"github.com/tandem-serve/tandem/worker"
)

var logger = slog.New(slog.DiscardHandler)

type workerProc struct {
	addr   string
	stop   func()
	worker *worker.Service
}

// startWorker serves a worker.Service over a sim engine with server.New, as a
// worker process does, and returns its address and a stop function that waits for
// Serve to return.
func startWorker(t *testing.T, id string, mode workerv1.WorkerMode) workerProc {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.TimeScale = 0
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ws := worker.New(id, id+"-inc", mode, "dev", eng)
	ws.Heartbeat = 50 * time.Millisecond
	// A short grace: the tracker's watch stream never ends by itself.
	srv, err := server.New(server.Config{Addr: "127.0.0.1:0", Grace: 100 * time.Millisecond, Logger: logger, Gatherer: prometheus.NewRegistry()},
		[]server.Handler{server.Mount(workerv1connect.WorkerServiceName)(workerv1connect.NewWorkerServiceHandler(ws, server.HandlerOptions(logger)...))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetServing(true)
	ws.SetServingHook(srv.SetServing)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ctx)
		_ = eng.Close()
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Errorf("worker %s did not stop", id)
			}
		})
	}
	t.Cleanup(stop)
	return workerProc{addr: srv.Addr(), stop: stop, worker: ws}
}

// observer records what the tracker reports.
type observer struct {
	mu      sync.Mutex
	updates map[string]int
	left    []string
	bad     []string
}

func (o *observer) Update(w router.Worker, msg *workerv1.WatchEventsResponse) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if msg.GetIncarnation() != w.ID+"-inc" {
		o.bad = append(o.bad, w.ID+" got "+msg.GetIncarnation())
	}
	o.updates[w.ID]++
	return nil
}

func (o *observer) Leave(w router.Worker) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.left = append(o.left, w.ID)
}

func (o *observer) snapshot() (map[string]int, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	u := map[string]int{}
	for k, v := range o.updates {
		u[k] = v
	}
	return u, append([]string(nil), o.left...)
}

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func TestTrackerMembership(t *testing.T) {
	dec := startWorker(t, "decode-1", workerv1.WorkerMode_WORKER_MODE_DECODE)
	pre := startWorker(t, "prefill-1", workerv1.WorkerMode_WORKER_MODE_PREFILL)

	obs := &observer{updates: map[string]int{}}
	tr := discovery.NewTracker(dial, obs, logger)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	select {
	case <-tr.Ready():
		t.Fatal("Ready closed before any address was set")
	default:
	}
	tr.Set(ctx, []string{dec.addr, pre.addr})
	select {
	case <-tr.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("Ready not closed after both workers came up")
	}

	want := []router.Worker{
		{ID: "decode-1", Address: dec.addr, Mode: workerv1.WorkerMode_WORKER_MODE_DECODE, TotalBlocks: sim.DefaultConfig().NumBlocks, Fingerprint: "sim/seed=1"},
		{ID: "prefill-1", Address: pre.addr, Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL, TotalBlocks: sim.DefaultConfig().NumBlocks, Fingerprint: "sim/seed=1"},
	}
	got := tr.Workers()
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("members %+v, want %+v", got, want)
	}
	if w, ok := tr.ByID("prefill-1"); !ok || w != want[1] {
		t.Errorf("ByID(prefill-1) = %+v, %v", w, ok)
	}
	if _, ok := tr.ByID("nobody"); ok {
		t.Error("ByID found a worker that does not exist")
	}
	// The observer hears each worker's stream, heartbeats included.
	testutil.WaitFor(t, "both workers sent a few updates", func() bool {
		u, _ := obs.snapshot()
		return u["decode-1"] >= 2 && u["prefill-1"] >= 2
	})
	obs.mu.Lock()
	if len(obs.bad) > 0 {
		t.Errorf("updates relayed to the wrong worker: %v", obs.bad)
	}
	obs.mu.Unlock()

	// A worker whose server stops leaves; the other stays.
	pre.stop()
	testutil.WaitFor(t, "prefill-1 left", func() bool {
		ws := tr.Workers()
		return len(ws) == 1 && ws[0] == want[0]
	})
	if _, left := obs.snapshot(); len(left) != 1 || left[0] != "prefill-1" {
		t.Errorf("observer heard leaves %v, want [prefill-1]", left)
	}
	if _, ok := tr.ByID("prefill-1"); ok {
		t.Error("ByID still finds the stopped worker")
	}

	// Removing an address from the set drops its member too.
	tr.Set(ctx, []string{pre.addr})
	testutil.WaitFor(t, "decode-1 dropped", func() bool { return len(tr.Workers()) == 0 })
}

func TestTrackerSet(t *testing.T) {
	w := startWorker(t, "decode-2", workerv1.WorkerMode_WORKER_MODE_AGGREGATED)
	tr := discovery.NewTracker(dial, nil, logger)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tr.Set(ctx, []string{w.addr})
	<-tr.Ready()
	if ws := tr.Workers(); len(ws) != 1 || ws[0].ID != "decode-2" || ws[0].Mode != workerv1.WorkerMode_WORKER_MODE_AGGREGATED {
		t.Fatalf("members %+v", ws)
	}
	// Setting the same addresses again changes nothing.
	tr.Set(ctx, []string{w.addr})
	if ws := tr.Workers(); len(ws) != 1 {
		t.Fatalf("members after an identical Set: %+v", ws)
	}
	// An empty set is ready at once and empties the membership.
	tr2 := discovery.NewTracker(dial, nil, logger)
	tr2.Set(ctx, nil)
	select {
	case <-tr2.Ready():
	default:
		t.Fatal("a tracker with no addresses is not ready")
	}
	tr.Set(ctx, nil)
	testutil.WaitFor(t, "the membership emptied", func() bool { return len(tr.Workers()) == 0 })
}

// A drained worker stays a member, marked draining, until it is undrained: static
// discovery has no health check to drop it, so the mark is what keeps work away.
func TestTrackerDraining(t *testing.T) {
	pre := startWorker(t, "prefill-d", workerv1.WorkerMode_WORKER_MODE_PREFILL)
	tr := discovery.NewTracker(dial, nil, logger)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tr.Set(ctx, []string{pre.addr})
	testutil.WaitFor(t, "prefill-d joined", func() bool { return len(tr.Workers()) == 1 })
	for _, serving := range []bool{false, true} {
		if _, err := pre.worker.Drain(ctx, connect.NewRequest(&workerv1.DrainRequest{Serving: serving})); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, fmt.Sprintf("draining=%v seen", !serving), func() bool {
			w, ok := tr.ByID("prefill-d")
			return ok && w.Draining == !serving
		})
	}
}

// A decode worker's prefill policy changed at run time (Consul KV) reaches the
// tracker through the event stream, so the router's gating classes follow it.
func TestTrackerFollowsPrefillPolicy(t *testing.T) {
	dec := startWorker(t, "decode-p", workerv1.WorkerMode_WORKER_MODE_DECODE)
	var mu sync.Mutex
	policy := "threshold"
	dec.worker.SetPolicy(func() *workerv1.PrefillPolicy {
		mu.Lock()
		defer mu.Unlock()
		return &workerv1.PrefillPolicy{Policy: policy}
	})
	tr := discovery.NewTracker(dial, nil, logger)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tr.Set(ctx, []string{dec.addr})
	testutil.WaitFor(t, "decode-p joined with policy threshold", func() bool {
		w, ok := tr.ByID("decode-p")
		return ok && w.Policy == "threshold"
	})
	mu.Lock()
	policy = "always-remote"
	mu.Unlock()
	testutil.WaitFor(t, "the new policy seen", func() bool {
		w, ok := tr.ByID("decode-p")
		return ok && w.Policy == "always-remote" && !w.PrefillsLocally()
	})
}

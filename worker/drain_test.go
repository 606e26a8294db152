package worker_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/proto/tandem/worker/v1/workerv1connect"
	"github.com/tandem-serve/tandem/worker"
)

// Draining is pushed to event subscribers when it happens, not at the next
// heartbeat (here an hour away): it is how the router and decode workers with
// static discovery learn to send the worker nothing new.
func TestDrainIsPushedToSubscribers(t *testing.T) {
	eng := newSim(t)
	svc := worker.New(workerID, incarnation, workerv1.WorkerMode_WORKER_MODE_DECODE, version, eng)
	svc.Heartbeat = time.Hour
	var (
		mu     sync.Mutex
		health []bool
	)
	svc.SetServingHook(func(serving bool) {
		mu.Lock()
		defer mu.Unlock()
		health = append(health, serving)
	})
	ctx := rpctest.Context(t)
	c, stream := subscribe(ctx, t, svc)
	first, err := stream.recv()
	if err != nil || first.GetDraining() {
		t.Fatalf("first message %v, %v: want one not draining", first, err)
	}
	for _, serving := range []bool{false, true} {
		if _, err := c.Drain(ctx, connect.NewRequest(&workerv1.DrainRequest{Serving: serving})); err != nil {
			t.Fatal(err)
		}
		msg, err := stream.recv()
		if err != nil {
			t.Fatalf("after Drain(serving=%v): %v", serving, err)
		}
		if msg.GetDraining() != !serving {
			t.Errorf("after Drain(serving=%v) the stream says draining=%v", serving, msg.GetDraining())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(health) != 2 || health[0] || !health[1] {
		t.Errorf("health hook calls %v, want [false true]", health)
	}
}

// subscribe serves svc over Connect on a test server and opens a WatchEvents
// stream from the start; the client is for the test's other calls.
func subscribe(ctx context.Context, t *testing.T, svc *worker.Service) (workerv1connect.WorkerServiceClient, connectStream) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(workerv1connect.NewWorkerServiceHandler(svc))
	c := workerv1connect.NewWorkerServiceClient(rpctest.Client(t), rpctest.NewServer(t, mux).URL)
	s, err := c.WatchEvents(ctx, connect.NewRequest(&workerv1.WatchEventsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return c, connectStream{s}
}

package workersvc

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/internal/testutil/rpctest"
	"github.com/tandem-serve/tandem/prefill"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
	"github.com/tandem-serve/tandem/services/rpc"
)

type fakeMembers struct {
	mu        sync.Mutex
	ws        map[string]router.Worker
	refreshes int
}

func (f *fakeMembers) ByID(id string) (router.Worker, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.ws[id]
	return w, ok
}

func (f *fakeMembers) Workers() []router.Worker {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []router.Worker
	for _, w := range f.ws {
		out = append(out, w)
	}
	return out
}

func (f *fakeMembers) Refresh() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshes++
}

func (f *fakeMembers) set(w router.Worker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ws[w.ID] = w
}

// A prefill worker is called on its KV transfer port when it has one, on its main
// port otherwise, and only dialled when a request goes to it: knowing a worker
// costs no connection.
func TestPrefillersFollowTheKVPort(t *testing.T) {
	var mu sync.Mutex
	var dialled []string
	dial := func(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		return grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...) // lazy: nothing listens
	}
	conns := rpc.NewPeerConns(dial, time.Minute)
	t.Cleanup(conns.Close)
	m := &fakeMembers{ws: map[string]router.Worker{}}
	p := newPrefillers(m, conns, nil)
	prefill := workerv1.WorkerMode_WORKER_MODE_PREFILL

	m.set(router.Worker{ID: "other", Address: "127.0.0.1:9000", Mode: prefill})
	m.set(router.Worker{ID: "p", Address: "127.0.0.1:9100", KVAddress: "127.0.0.1:9101", Mode: prefill})
	m.set(router.Worker{ID: "d", Address: "127.0.0.1:9300", Mode: workerv1.WorkerMode_WORKER_MODE_DECODE})
	if ids := p.IDs(); !slices.Equal(sorted(ids), []string{"other", "p"}) {
		t.Errorf("IDs() = %v, want the prefill workers other and p", ids)
	}
	if len(dialled) != 0 {
		t.Fatalf("dialled %v before any request went to a prefill worker", dialled)
	}
	for range 2 {
		if _, ok := p.Client("p"); !ok {
			t.Fatal("Client(p) failed")
		}
	}
	if !slices.Equal(sorted(dialled), []string{"127.0.0.1:9100", "127.0.0.1:9101"}) {
		t.Fatalf("dialled %v; want p's main and KV ports once each, and not the worker no request went to", dialled)
	}

	// p restarts on another KV port: the next request dials it.
	m.set(router.Worker{ID: "p", Address: "127.0.0.1:9100", KVAddress: "127.0.0.1:9202", Mode: prefill})
	if _, ok := p.Client("p"); !ok {
		t.Fatal("Client(p) after the restart failed")
	}
	if !slices.Contains(dialled, "127.0.0.1:9202") {
		t.Fatalf("dialled %v; want the new KV port", dialled)
	}
	if _, ok := p.Client("nobody"); ok {
		t.Error("Client of a worker discovery does not know succeeded")
	}
	if _, ok := p.Client("d"); ok {
		t.Error("Client of a decode worker succeeded")
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// A KV transfer port that cannot be reached (a firewall, a wrong advertised port)
// costs speed, not the remote prefill: the main port serves the same Prefill.
func TestPrefillersFallBackToTheMainPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().String()
	ln.Close() // nothing listens there now

	eng, err := sim.New(func() sim.Config { c := sim.DefaultConfig(); c.TimeScale = 0; return c }())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	svc, err := prefill.New(prefill.Config{WorkerID: "p", ChunkBytes: 1 << 20, MaxLease: 10 * time.Second}, eng, slog.New(slog.DiscardHandler),
		prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(prefillv1connect.NewPrefillServiceHandler(svc))
	srv := rpctest.NewServer(t, mux)

	dial := func(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	}
	conns := rpc.NewPeerConns(dial, time.Minute)
	t.Cleanup(conns.Close)
	m := &fakeMembers{ws: map[string]router.Worker{}}
	m.set(router.Worker{ID: "p", Address: rpctest.Addr(srv), KVAddress: closedPort, Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL})
	p := newPrefillers(m, conns, slog.New(slog.DiscardHandler))

	c, ok := p.Client("p")
	if !ok {
		t.Fatal("Client(p) failed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := c.Prefill(ctx, &prefillv1.PrefillRequest{RequestId: "r", PromptTokenIds: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
		15, 16, 17}})
	if err != nil {
		t.Fatalf("Prefill with the KV port closed: %v", err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetHeader() == nil {
		t.Fatalf("first message %v, %v; want the header, from the main port", first, err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	if !p.warned[closedPort] {
		t.Error("the unreachable KV port was not noted")
	}
	if m.refreshes == 0 {
		t.Error("the unreachable KV port did not have discovery ask the worker again where it is")
	}
}

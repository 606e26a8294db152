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
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-serve/tandem/engine/sim"
	"github.com/tandem-serve/tandem/internal/rpctest"
	"github.com/tandem-serve/tandem/prefill"
	prefillv1 "github.com/tandem-serve/tandem/proto/tandem/prefill/v1"
	"github.com/tandem-serve/tandem/proto/tandem/prefill/v1/prefillv1connect"
	workerv1 "github.com/tandem-serve/tandem/proto/tandem/worker/v1"
	"github.com/tandem-serve/tandem/router"
)

type fakeMembers struct {
	mu sync.Mutex
	ws map[string]router.Worker
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

func (f *fakeMembers) set(w router.Worker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ws[w.ID] = w
}

// A prefill worker is called on its KV transfer port when it has one, on its main
// port otherwise; connections to addresses no member has any more (a worker that
// came back on another port, or left) are closed rather than kept forever.
func TestPrefillersFollowTheKVPort(t *testing.T) {
	var dialled, dialledKV []string
	conns := map[string]*grpc.ClientConn{}
	dial := func(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
		if len(opts) > 0 { // the KV transfer port's options
			dialledKV = append(dialledKV, addr)
		} else {
			dialled = append(dialled, addr)
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())) // lazy: nothing listens
		conns[addr] = cc
		return cc, err
	}
	m := &fakeMembers{ws: map[string]router.Worker{}}
	p := newPrefillers(m, dial, nil)
	t.Cleanup(p.close)
	prefill := workerv1.WorkerMode_WORKER_MODE_PREFILL

	m.set(router.Worker{ID: "old", Address: "127.0.0.1:9000", Mode: prefill})
	m.set(router.Worker{ID: "p", Address: "127.0.0.1:9100", KVAddress: "127.0.0.1:9101", Mode: prefill})
	for _, id := range []string{"p", "p", "old"} {
		if _, ok := p.Client(id); !ok {
			t.Fatalf("Client(%s) failed", id)
		}
	}
	if !slices.Equal(dialledKV, []string{"127.0.0.1:9101"}) || !slices.Equal(dialled, []string{"127.0.0.1:9100", "127.0.0.1:9000"}) {
		t.Fatalf("dialled main %v and KV %v; want each address once", dialled, dialledKV)
	}
	oldKV, oldWorker := conns["127.0.0.1:9101"], conns["127.0.0.1:9000"]

	// p restarts on another KV port, and "old" leaves.
	m.set(router.Worker{ID: "p", Address: "127.0.0.1:9100", KVAddress: "127.0.0.1:9202", Mode: prefill})
	m.mu.Lock()
	delete(m.ws, "old")
	m.mu.Unlock()
	if _, ok := p.Client("p"); !ok {
		t.Fatal("Client(p) after the restart failed")
	}
	if !slices.Equal(dialledKV, []string{"127.0.0.1:9101", "127.0.0.1:9202"}) {
		t.Fatalf("dialled KV %v; want the new port", dialledKV)
	}
	for name, cc := range map[string]*grpc.ClientConn{"p's old KV port": oldKV, "the worker that left": oldWorker} {
		if cc.GetState() != connectivity.Shutdown {
			t.Errorf("the connection to %s is still open (%v)", name, cc.GetState())
		}
	}
	if kept := p.conns.Addrs(); len(kept) != 2 {
		t.Errorf("connections kept: %v; want p's main and new KV port", kept)
	}
	if _, ok := p.Client("nobody"); ok {
		t.Error("Client of a worker discovery does not know succeeded")
	}
}

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
	m := &fakeMembers{ws: map[string]router.Worker{}}
	m.set(router.Worker{ID: "p", Address: rpctest.Addr(srv), KVAddress: closedPort, Mode: workerv1.WorkerMode_WORKER_MODE_PREFILL})
	p := newPrefillers(m, dial, slog.New(slog.DiscardHandler))
	t.Cleanup(p.close)

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
}

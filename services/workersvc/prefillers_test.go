package workersvc

import (
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

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
// port otherwise; when it comes back on another port, the connection to the old
// one is closed rather than kept forever.
func TestPrefillersFollowTheKVPort(t *testing.T) {
	var dialled, dialledKV []string
	var all []*grpc.ClientConn
	dialer := func(into *[]string) func(string) (*grpc.ClientConn, error) {
		return func(addr string) (*grpc.ClientConn, error) {
			*into = append(*into, addr)
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())) // lazy: nothing listens
			all = append(all, cc)
			return cc, err
		}
	}
	t.Cleanup(func() {
		for _, cc := range all {
			_ = cc.Close()
		}
	})
	m := &fakeMembers{ws: map[string]router.Worker{}}
	p := &prefillers{tracker: m, dial: dialer(&dialled), dialKV: dialer(&dialledKV), conns: map[string]*grpc.ClientConn{}}
	prefill := workerv1.WorkerMode_WORKER_MODE_PREFILL

	m.set(router.Worker{ID: "old", Address: "127.0.0.1:9000", Mode: prefill})
	m.set(router.Worker{ID: "p", Address: "127.0.0.1:9100", KVAddress: "127.0.0.1:9101", Mode: prefill})
	for range 2 {
		if _, ok := p.Client("p"); !ok {
			t.Fatal("Client(p) failed")
		}
	}
	if _, ok := p.Client("old"); !ok {
		t.Fatal("Client(old) failed")
	}
	if len(dialledKV) != 1 || dialledKV[0] != "127.0.0.1:9101" || len(dialled) != 1 || dialled[0] != "127.0.0.1:9000" {
		t.Fatalf("dialled main %v and KV %v; want old's main port and p's KV port, once each", dialled, dialledKV)
	}
	first := p.conns["127.0.0.1:9101"]

	m.set(router.Worker{ID: "p", Address: "127.0.0.1:9100", KVAddress: "127.0.0.1:9202", Mode: prefill})
	if _, ok := p.Client("p"); !ok {
		t.Fatal("Client(p) after the restart failed")
	}
	if len(dialledKV) != 2 || dialledKV[1] != "127.0.0.1:9202" {
		t.Fatalf("dialled KV %v; want the new port", dialledKV)
	}
	if _, kept := p.conns["127.0.0.1:9101"]; kept || first.GetState() != connectivity.Shutdown {
		t.Errorf("the connection to the old KV port is still open (state %v)", first.GetState())
	}
	if _, ok := p.Client("nobody"); ok {
		t.Error("Client of a worker discovery does not know succeeded")
	}
}
